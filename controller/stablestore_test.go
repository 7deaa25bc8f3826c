package controller

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// What Raft expects of a StableStore: a missing key reads as nil / 0 (Raft
// tells "never voted" by a nil LastVoteCand), values come back as set, and
// survive a reopen.
func TestStableStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), QuorumStateFile)
	s, err := OpenStableStore(path)
	require.NoError(t, err)
	v, err := s.Get([]byte("LastVoteCand"))
	require.NoError(t, err)
	require.Nil(t, v)
	u, err := s.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Zero(t, u)
	require.NoFileExists(t, path, "reading writes nothing")

	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 7))
	require.NoError(t, s.SetUint64([]byte("LastVoteTerm"), 1<<63+5))
	require.NoError(t, s.Set([]byte("LastVoteCand"), []byte("node-2")))
	require.NoError(t, s.Set([]byte("empty"), []byte{}))
	require.NoError(t, s.Set([]byte("odd \"key\"\n\x00"), []byte{0, 1, 2, 255}))
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 8))

	for _, s := range []*StableStore{s, mustOpenStable(t, path)} {
		u, err := s.GetUint64([]byte("CurrentTerm"))
		require.NoError(t, err)
		require.Equal(t, uint64(8), u)
		u, err = s.GetUint64([]byte("LastVoteTerm"))
		require.NoError(t, err)
		require.Equal(t, uint64(1<<63+5), u)
		v, err := s.Get([]byte("LastVoteCand"))
		require.NoError(t, err)
		require.Equal(t, []byte("node-2"), v)
		v, err = s.Get([]byte("empty"))
		require.NoError(t, err)
		require.NotNil(t, v, "a value set empty is not a missing key")
		require.Empty(t, v)
		v, err = s.Get([]byte("odd \"key\"\n\x00"))
		require.NoError(t, err)
		require.Equal(t, []byte{0, 1, 2, 255}, v)
		v, err = s.Get([]byte("CurrentTerm"))
		require.NoError(t, err)
		require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 8}, v, "a uint64 reads as 8 bytes big-endian")
		_, err = s.GetUint64([]byte("LastVoteCand"))
		require.Error(t, err, "6 bytes are not a uint64")
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(data), stableMagic+"\n\"CurrentTerm\" u 8\n"), "%s", data)
}

func mustOpenStable(t *testing.T, path string) *StableStore {
	t.Helper()
	s, err := OpenStableStore(path)
	require.NoError(t, err)
	return s
}

// A damaged file is an error naming it, never an empty store: a term and
// vote read as zero could let the node vote twice in a term. Every single
// byte flipped, and every cut, is caught.
func TestStableStoreRefusesDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), QuorumStateFile)
	s := mustOpenStable(t, path)
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 12))
	require.NoError(t, s.Set([]byte("LastVoteCand"), []byte("node-3")))
	good, err := os.ReadFile(path)
	require.NoError(t, err)

	check := func(what string, data []byte) {
		require.NoError(t, os.WriteFile(path, data, 0o644))
		_, err := OpenStableStore(path)
		require.ErrorIs(t, err, ErrBadStableStore, what)
		require.ErrorIs(t, err, record.ErrCorrupt, what)
		require.ErrorContains(t, err, path, what)
	}
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0x20
		check(fmt.Sprintf("byte %d", i), bad)
	}
	for n := 0; n < len(good); n++ {
		check("cut", good[:n])
	}
	check("appended", append(append([]byte(nil), good...), "x\n"...))
}

// A Set that fails (here its fsync) leaves the file's contents uncertain:
// the store refuses everything until reopened, and the reopened store
// holds the old value or the new one.
func TestStableStoreFailedSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), QuorumStateFile)
	var sw vfs.Switch
	s, err := openStableStore(vfs.NewFaultFS(vfs.Default, sw.Inject), path)
	require.NoError(t, err)
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 1))
	sw.FailAfter(vfs.OpSyncDir, nil, 0, vfs.ErrIO, 1)
	require.ErrorIs(t, s.SetUint64([]byte("CurrentTerm"), 2), vfs.ErrIO)
	_, err = s.GetUint64([]byte("CurrentTerm"))
	require.ErrorIs(t, err, vfs.ErrIO, "refused until reopened")
	require.ErrorIs(t, s.Set([]byte("k"), []byte("v")), vfs.ErrIO)

	u, err := mustOpenStable(t, path).GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Contains(t, []uint64{1, 2}, u)
}

// A full disk does not stop the store: a Set that meets ENOSPC spends some
// of the reserve kept beside the file and writes again, so that Raft can
// record a new term (hashicorp/raft panics when it cannot). Without a
// reserve the Set fails as before.
func TestStableStoreFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), QuorumStateFile)
	var sw vfs.Switch
	s, err := openStableStore(vfs.NewFaultFS(vfs.Default, sw.Inject), path)
	require.NoError(t, err)
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 1))
	st, err := os.Stat(path + ReserveSuffix)
	require.NoError(t, err, "a Set leaves a reserve")
	require.EqualValues(t, ReserveBytes, st.Size())

	tmp := func(p string) bool { return strings.HasSuffix(p, ".tmp") }
	sw.FailAfter(vfs.OpWrite, tmp, 0, vfs.ErrNoSpace, 2)
	sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1) // the disk stays full: no refill
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 2), "the reserve makes room")
	st, err = os.Stat(path + ReserveSuffix)
	require.NoError(t, err)
	require.EqualValues(t, ReserveBytes-2*reserveStep, st.Size(), "two steps spent")
	u, err := mustOpenStable(t, path).GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(2), u)

	sw.Reset()
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 3))
	st, err = os.Stat(path + ReserveSuffix)
	require.NoError(t, err)
	require.EqualValues(t, ReserveBytes, st.Size(), "refilled once there is room")

	// No reserve left: the Set fails and the store refuses until reopened.
	require.NoError(t, os.Remove(path+ReserveSuffix))
	sw.FailAfter(vfs.OpWrite, tmp, 0, vfs.ErrNoSpace, -1)
	sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1)
	require.ErrorIs(t, s.SetUint64([]byte("CurrentTerm"), 4), vfs.ErrNoSpace)
	u, err = mustOpenStable(t, path).GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(3), u, "the failed Set changed nothing")
}
