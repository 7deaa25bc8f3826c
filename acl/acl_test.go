package acl

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func allow(rt ResourceType, name string, pat PatternType, principal string, op Operation) Binding {
	return Binding{ResourceType: rt, Name: name, Pattern: pat, Principal: principal, Host: "*", Operation: op, Permission: Allow}
}

func TestAuthorize(t *testing.T) {
	deny := allow(ResourceTopic, "orders", PatternLiteral, "User:bob", OpRead)
	deny.Permission = Deny
	hostOnly := allow(ResourceTopic, "metrics", PatternLiteral, "User:carol", OpWrite)
	hostOnly.Host = "10.0.0.7"
	a, err := New(Config{SuperUsers: []string{"User:root"}, Bindings: []Binding{
		allow(ResourceTopic, "orders", PatternLiteral, "User:alice", OpRead),
		allow(ResourceTopic, "orders", PatternLiteral, "User:bob", OpAll),
		deny,
		allow(ResourceTopic, "logs-", PatternPrefixed, "User:alice", OpWrite),
		allow(ResourceTopic, "*", PatternLiteral, "User:*", OpDescribe),
		allow(ResourceGroup, "billing", PatternLiteral, "User:alice", OpRead),
		allow(ResourceCluster, ClusterName, PatternLiteral, "User:ops", OpAlterConfigs),
		hostOnly,
	}})
	require.NoError(t, err)
	for _, c := range []struct {
		principal, host string
		op              Operation
		rt              ResourceType
		name            string
		want            bool
	}{
		{"User:alice", "1.2.3.4", OpRead, ResourceTopic, "orders", true},
		{"User:alice", "1.2.3.4", OpWrite, ResourceTopic, "orders", false}, // each grant enables exactly its operation
		{"User:alice", "1.2.3.4", OpDelete, ResourceTopic, "orders", false},
		{"User:alice", "1.2.3.4", OpDescribe, ResourceTopic, "orders", true}, // implied by READ, and by the wildcard
		{"User:bob", "1.2.3.4", OpWrite, ResourceTopic, "orders", true},      // ALL
		{"User:bob", "1.2.3.4", OpRead, ResourceTopic, "orders", false},      // deny wins over ALL
		{"User:bob", "1.2.3.4", OpDescribe, ResourceTopic, "orders", true},   // a DENY READ does not deny DESCRIBE
		{"User:alice", "1.2.3.4", OpWrite, ResourceTopic, "logs-app", true},  // prefixed
		{"User:alice", "1.2.3.4", OpWrite, ResourceTopic, "logs", false},     // shorter than the prefix
		{"User:alice", "1.2.3.4", OpWrite, ResourceTopic, "applogs-", false},
		{"User:dave", "1.2.3.4", OpDescribe, ResourceTopic, "anything", true}, // User:* on *
		{"User:dave", "1.2.3.4", OpRead, ResourceTopic, "anything", false},
		{"User:alice", "1.2.3.4", OpRead, ResourceGroup, "billing", true},
		{"User:alice", "1.2.3.4", OpRead, ResourceGroup, "other", false},
		{"User:alice", "1.2.3.4", OpRead, ResourceTopic, "billing", false}, // another resource type
		{"User:ops", "1.2.3.4", OpDescribeConfigs, ResourceCluster, ClusterName, true},
		{"User:ops", "1.2.3.4", OpAlter, ResourceCluster, ClusterName, false},
		{"User:carol", "10.0.0.7", OpWrite, ResourceTopic, "metrics", true},
		{"User:carol", "10.0.0.8", OpWrite, ResourceTopic, "metrics", false},   // another host
		{"User:root", "1.2.3.4", OpDelete, ResourceCluster, ClusterName, true}, // super user
		{"User:nobody", "1.2.3.4", OpRead, ResourceTopic, "nothing-here", false},
	} {
		got := a.Authorize(c.principal, c.host, c.op, c.rt, c.name)
		require.Equal(t, c.want, got, "%s from %s: %v %v %q", c.principal, c.host, c.op, c.rt, c.name)
	}
}

func TestCreateDescribeDeleteAndFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acls")
	store, initial, err := OpenFile(path)
	require.NoError(t, err)
	require.Empty(t, initial)
	a, err := New(Config{Store: store})
	require.NoError(t, err)

	good := allow(ResourceTopic, "orders", PatternLiteral, "User:alice", OpRead)
	errs := a.Create([]Binding{
		good,
		good, // identical: fine, no duplicate
		{ResourceType: ResourceAny, Name: "x", Pattern: PatternLiteral, Principal: "User:a", Host: "*", Operation: OpRead, Permission: Allow},
		{ResourceType: ResourceTopic, Name: "x", Pattern: PatternMatch, Principal: "User:a", Host: "*", Operation: OpRead, Permission: Allow},
		{ResourceType: ResourceCluster, Name: "other", Pattern: PatternLiteral, Principal: "User:a", Host: "*", Operation: OpAlter, Permission: Allow},
		{ResourceType: ResourceTopic, Name: "x", Pattern: PatternLiteral, Principal: "alice", Host: "*", Operation: OpRead, Permission: Allow},
		{ResourceType: ResourceTopic, Name: "", Pattern: PatternLiteral, Principal: "User:a", Host: "*", Operation: OpRead, Permission: Allow},
		{ResourceType: ResourceTopic, Name: "x", Pattern: PatternLiteral, Principal: "User:a", Host: "*", Operation: OpAny, Permission: Allow},
		{ResourceType: ResourceTopic, Name: "x", Pattern: PatternLiteral, Principal: "User:a", Host: "*", Operation: OpRead, Permission: PermissionAny},
		allow(ResourceTopic, "logs-", PatternPrefixed, "User:bob", OpWrite),
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for i := 2; i <= 8; i++ {
		require.ErrorIs(t, errs[i], ErrInvalid, "binding %d", i)
	}
	require.NoError(t, errs[9])
	require.Equal(t, 2, a.Len())

	name := "logs-app"
	got, err := a.Describe(Filter{ResourceType: ResourceTopic, Name: &name, Pattern: PatternMatch, Operation: OpAny, Permission: PermissionAny})
	require.NoError(t, err)
	require.Len(t, got, 1, "MATCH: the prefixed binding applies to logs-app")
	all, err := a.Describe(Filter{ResourceType: ResourceAny, Pattern: PatternAny, Operation: OpAny, Permission: PermissionAny})
	require.NoError(t, err)
	require.Len(t, all, 2)
	_, err = a.Describe(Filter{ResourceType: ResourceUnknown, Pattern: PatternAny, Operation: OpAny, Permission: PermissionAny})
	require.ErrorIs(t, err, ErrInvalid)

	// Reopened from the file: the same bindings.
	store2, loaded, err := OpenFile(path)
	require.NoError(t, err)
	require.ElementsMatch(t, all, loaded)

	bob := "User:bob"
	removed, ferrs, err := a.Delete([]Filter{{ResourceType: ResourceAny, Pattern: PatternAny, Principal: &bob, Operation: OpAny, Permission: PermissionAny}})
	require.NoError(t, err)
	require.NoError(t, ferrs[0])
	require.Len(t, removed[0], 1)
	_, loaded, err = OpenFile(path)
	require.NoError(t, err)
	require.Equal(t, []Binding{good}, loaded)
	_ = store2

	// A damaged file is refused, never guessed at.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[20] ^= 0x01
	require.NoError(t, os.WriteFile(path, data, 0o600))
	_, _, err = OpenFile(path)
	require.ErrorIs(t, err, ErrBadFile)
}

// A failed save adds nothing: the ACLs in memory stay what the file says.
func TestCreateFailedSaveChangesNothing(t *testing.T) {
	a, err := New(Config{Store: failingStore{}})
	require.NoError(t, err)
	errs := a.Create([]Binding{allow(ResourceTopic, "t", PatternLiteral, "User:a", OpRead)})
	require.Error(t, errs[0])
	require.Zero(t, a.Len())
	require.False(t, a.Authorize("User:a", "h", OpRead, ResourceTopic, "t"))
}

type failingStore struct{}

func (failingStore) Save([]Binding) error { return fmt.Errorf("disk full") }

func BenchmarkAuthorize1000(b *testing.B) {
	var bs []Binding
	for i := range 1000 {
		bs = append(bs, allow(ResourceTopic, fmt.Sprintf("topic-%d", i), PatternLiteral, fmt.Sprintf("User:u%d", i%50), OpWrite))
	}
	a, err := New(Config{Bindings: bs})
	require.NoError(b, err)
	for b.Loop() {
		if !a.Authorize("User:u7", "127.0.0.1", OpWrite, ResourceTopic, "topic-507") {
			b.Fatal("denied")
		}
	}
}

// sharedStore is a VersionedStore shared by several Authorizers, as a
// cluster's metadata log is.
type sharedStore struct {
	version int64
	data    []byte
}

var errStale = fmt.Errorf("stale")

func (s *sharedStore) Save([]Binding) error { return fmt.Errorf("unversioned save") }
func (s *sharedStore) SaveAt(bs []Binding, base int64) error {
	if base != s.version {
		return errStale
	}
	data, err := Marshal(bs)
	if err != nil {
		return err
	}
	s.version, s.data = base+1, data
	return nil
}

// Two Authorizers on one VersionedStore: a change made from an old
// version is refused and changes nothing; after Sync it is made again on
// top of the other's.
func TestVersionedStoreAndSync(t *testing.T) {
	st := &sharedStore{}
	a1, err := New(Config{Store: st})
	require.NoError(t, err)
	a2, err := New(Config{})
	require.NoError(t, err)
	a2.SetStore(st)

	r := allow(ResourceTopic, "t", PatternLiteral, "User:a", OpRead)
	w := allow(ResourceTopic, "t", PatternLiteral, "User:b", OpWrite)
	require.NoError(t, a1.Create([]Binding{r})[0])
	require.Equal(t, int64(1), a1.Version())

	require.ErrorIs(t, a2.Create([]Binding{w})[0], errStale)
	require.Zero(t, a2.Len())
	require.Zero(t, a2.Version())

	synced, err := Unmarshal(st.data)
	require.NoError(t, err)
	require.NoError(t, a2.Sync(synced, st.version))
	require.True(t, a2.Authorize("User:a", "h", OpRead, ResourceTopic, "t"))
	require.NoError(t, a2.Create([]Binding{w})[0])
	require.Equal(t, int64(2), st.version)

	// An older or equal version changes nothing; invalid bindings are
	// refused whole.
	require.NoError(t, a2.Sync(nil, 2))
	require.Equal(t, 2, a2.Len())
	bad := r
	bad.Operation = OpUnknown
	require.ErrorIs(t, a1.Sync([]Binding{w, bad}, 9), ErrInvalid)
	require.Equal(t, 1, a1.Len())
	require.Equal(t, int64(1), a1.Version())

	// a1 catches up and deletes through the store.
	all, err := Unmarshal(st.data)
	require.NoError(t, err)
	require.NoError(t, a1.Sync(all, st.version))
	removed, errs, err := a1.Delete([]Filter{{ResourceType: ResourceAny, Pattern: PatternAny, Operation: OpAny, Permission: PermissionAny}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Len(t, removed[0], 2)
	require.Equal(t, int64(3), st.version)
	require.False(t, a1.Authorize("User:b", "h", OpWrite, ResourceTopic, "t"))
}
