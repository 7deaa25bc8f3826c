package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/internal/crcfile"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SCRAM credentials managed over the protocol (KIP-554):
// DescribeUserScramCredentials (50) lists users' mechanisms and iteration
// counts, never salts or keys; AlterUserScramCredentials (51) adds,
// replaces and deletes credentials. The client salts and hashes the
// password itself (PBKDF2) and sends the salt and the salted password; the
// server keeps the salt, StoredKey and ServerKey it derives, as Kafka does.
// Credentials changed this way apply to the next authentication, are kept
// in Options.SCRAMFile, and replace a configured password (Options.SASL)
// of the same user and mechanism; a configured user deleted this way is
// back at the next start while the configuration still names it.
// Describe needs DESCRIBE on the cluster, Alter ALTER.

const (
	errResourceNotFound       int16 = 91
	errDuplicateResourceCode  int16 = 92
	errUnacceptableCredential int16 = 93

	scramMinIterations = 4096
	scramMaxIterations = 16384
)

func init() {
	register(kmsg.DescribeUserSCRAMCredentials, 0, 0, describeUserSCRAMCredentials)
	register(kmsg.AlterUserSCRAMCredentials, 0, 0, alterUserSCRAMCredentials)
}

// scramMechanisms are KIP-554's mechanism codes.
var scramMechanisms = map[int8]string{1: mechSCRAMSHA256, 2: mechSCRAMSHA512}

func scramMechanismCode(mech string) int8 {
	for code, m := range scramMechanisms {
		if m == mech {
			return code
		}
	}
	return 0
}

// scramUsers is the current credentials of a mechanism, by user: a map no
// one changes (Alter replaces it), safe to read without the lock.
func (s *Server) scramUsers(mech string) map[string]scramCredential {
	s.scramMu.RLock()
	defer s.scramMu.RUnlock()
	return s.scram[mech]
}

func describeUserSCRAMCredentials(c *conn, req *request, body *kmsg.DescribeUserSCRAMCredentialsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !c.canCluster(acl.OpDescribe) {
		resp.ErrorCode = errClusterAuthorizationFailed
		return resp, nil
	}
	c.s.scramMu.RLock()
	all := map[string][]kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{}
	for mech, users := range c.s.scram {
		for user, cred := range users {
			all[user] = append(all[user], kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{
				Mechanism: scramMechanismCode(mech), Iterations: int32(cred.iterations)})
		}
	}
	c.s.scramMu.RUnlock()
	var names []string
	if len(body.Users) == 0 {
		names = slices.Sorted(maps.Keys(all))
	}
	count := map[string]int{}
	for _, u := range body.Users {
		names = append(names, u.Name)
		count[u.Name]++
	}
	done := map[string]bool{}
	for _, name := range names {
		if done[name] {
			continue
		}
		done[name] = true
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = name
		switch infos, ok := all[name]; {
		case count[name] > 1:
			r.ErrorCode, r.ErrorMessage = errDuplicateResourceCode, strPtr("user "+name+" listed twice")
		case !ok:
			r.ErrorCode, r.ErrorMessage = errResourceNotFound, strPtr("no SCRAM credentials for user "+name)
		default:
			slices.SortFunc(infos, func(a, b kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo) int {
				return int(a.Mechanism) - int(b.Mechanism)
			})
			r.CredentialInfos = infos
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func alterUserSCRAMCredentials(c *conn, req *request, body *kmsg.AlterUserSCRAMCredentialsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	users := map[string]int{}
	var order []string
	for _, d := range body.Deletions {
		if users[d.Name] == 0 {
			order = append(order, d.Name)
		}
		users[d.Name]++
	}
	for _, u := range body.Upsertions {
		if users[u.Name] == 0 {
			order = append(order, u.Name)
		}
		users[u.Name]++
	}
	results := map[string]*kmsg.AlterUserSCRAMCredentialsResponseResult{}
	fail := func(user string, code int16, msg string) {
		if r := results[user]; r.ErrorCode == errNone {
			r.ErrorCode, r.ErrorMessage = code, &msg
		}
	}
	for _, name := range order {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User = name
		results[name] = &r
		switch {
		case !c.canCluster(acl.OpAlter):
			fail(name, errClusterAuthorizationFailed, "Authorization failed.")
		case c.s.opts.SASL == nil:
			fail(name, errIllegalSASLState, "SASL is not enabled on this broker")
		case name == "":
			fail(name, errUnacceptableCredential, "empty user name")
		case users[name] > 1:
			fail(name, errDuplicateResourceCode, "a user may appear once per request")
		}
	}
	// The checks above hold whatever the credentials are; those below
	// depend on them, and are made again if a cluster's controller
	// refuses the change as made from credentials another node changed.
	pre := map[string]kmsg.AlterUserSCRAMCredentialsResponseResult{}
	for name, r := range results {
		pre[name] = *r
	}
	var saveErr error
	c.s.settings.retryStale(c.ctx, c.s.scramVersion, func() error {
		for name, r := range results {
			*r = pre[name]
		}
		saveErr = c.s.alterSCRAM(body, results, fail)
		return saveErr
	})
	for _, name := range order {
		r := results[name]
		if saveErr != nil && r.ErrorCode == errNone {
			r.ErrorCode, r.ErrorMessage = errKafkaStorageError, strPtr(saveErr.Error())
		}
		if r.ErrorCode == errNone {
			c.s.logger.Info("SCRAM credentials changed", "by", c.principal, "user", name)
		}
		resp.Results = append(resp.Results, *r)
	}
	return resp, nil
}

// alterSCRAM applies AlterUserScramCredentials' deletions and upsertions
// to the credentials held, marking each user's failures in results, and
// saves them: the save's error.
func (s *Server) alterSCRAM(body *kmsg.AlterUserSCRAMCredentialsRequest, results map[string]*kmsg.AlterUserSCRAMCredentialsResponseResult, fail func(string, int16, string)) error {
	s.scramAlterMu.Lock()
	defer s.scramAlterMu.Unlock()
	// The maps held are replaced whole, never changed: read them under
	// the lock, use them after.
	s.scramMu.RLock()
	cur := s.scram
	f := s.opts.SCRAMFile
	var curManaged map[string]map[string]scramCredential
	var base int64
	if f != nil {
		curManaged, base = f.creds, f.version
	}
	s.scramMu.RUnlock()
	next := cloneCreds(cur)
	// managed is what the file (or the metadata log) keeps: the
	// credentials set over the protocol, not those of --sasl-scram flags.
	var managed map[string]map[string]scramCredential
	if f != nil {
		managed = cloneCreds(curManaged)
	}
	for _, d := range body.Deletions {
		mech, ok := scramMechanisms[d.Mechanism]
		switch {
		case !ok:
			fail(d.Name, errUnsupportedSASLMechanism, fmt.Sprintf("unknown SCRAM mechanism %d", d.Mechanism))
		case results[d.Name].ErrorCode != errNone:
		default:
			if _, had := next[mech][d.Name]; !had {
				fail(d.Name, errResourceNotFound, "no "+mech+" credential for user "+d.Name)
				break
			}
			if _, set := managed[mech][d.Name]; f != nil && f.cluster != nil && !set {
				// Every node has it from its own flags: deleting it here
				// would hold on this node only, until its next sync.
				fail(d.Name, errResourceNotFound, "the "+mech+" credential of user "+d.Name+" is configured on the nodes (--sasl-scram-*), not set over the protocol: remove it there")
				break
			}
			delete(next[mech], d.Name)
			delete(managed[mech], d.Name)
		}
	}
	for _, u := range body.Upsertions {
		mech, ok := scramMechanisms[u.Mechanism]
		switch {
		case !ok:
			fail(u.Name, errUnsupportedSASLMechanism, fmt.Sprintf("unknown SCRAM mechanism %d", u.Mechanism))
		case u.Iterations < scramMinIterations || u.Iterations > scramMaxIterations:
			fail(u.Name, errUnacceptableCredential, fmt.Sprintf("iterations %d outside %d-%d", u.Iterations, scramMinIterations, scramMaxIterations))
		case len(u.Salt) == 0 || len(u.SaltedPassword) != scramHash(mech)().Size():
			fail(u.Name, errUnacceptableCredential, "a salt and a salted password of the mechanism's hash size are needed")
		case results[u.Name].ErrorCode != errNone:
		default:
			h := scramHash(mech)
			stored := h()
			stored.Write(hmacOf(h, u.SaltedPassword, []byte("Client Key")))
			if next[mech] == nil {
				next[mech] = map[string]scramCredential{}
			}
			cred := scramCredential{salt: bytes.Clone(u.Salt), iterations: int(u.Iterations),
				storedKey: stored.Sum(nil), serverKey: hmacOf(h, u.SaltedPassword, []byte("Server Key"))}
			next[mech][u.Name] = cred
			if managed != nil {
				if managed[mech] == nil {
					managed[mech] = map[string]scramCredential{}
				}
				managed[mech][u.Name] = cred
			}
		}
	}
	// A user with any failure changes nothing: take its credentials back
	// from the current ones.
	for name, r := range results {
		if r.ErrorCode == errNone {
			continue
		}
		for mech := range next {
			if c, ok := cur[mech][name]; ok {
				next[mech][name] = c
			} else {
				delete(next[mech], name)
			}
		}
		for mech := range managed {
			if c, ok := curManaged[mech][name]; ok {
				managed[mech][name] = c
			} else {
				delete(managed[mech], name)
			}
		}
	}
	if f != nil {
		if err := f.saveAt(managed, base); err != nil {
			return err
		}
	}
	s.scramMu.Lock()
	defer s.scramMu.Unlock()
	if f != nil && f.version > base {
		// A sync installed a newer version meanwhile: ours, already
		// applied, or one made after it.
		return nil
	}
	s.scram = next
	if f != nil {
		f.creds = managed
		if f.cluster != nil {
			f.version = base + 1
		}
	}
	return nil
}

func cloneCreds(c map[string]map[string]scramCredential) map[string]map[string]scramCredential {
	out := make(map[string]map[string]scramCredential, len(c))
	for mech, us := range c {
		out[mech] = maps.Clone(us)
	}
	return out
}

// SCRAMFile keeps the SCRAM credentials AlterUserScramCredentials sets, in
// one file replaced atomically, CRC-32C checked like the ACL and quota
// files:
//
//	spool-scram 1
//	{"SCRAM-SHA-256":{"alice":{"Salt":"...","Iterations":4096,"StoredKey":"...","ServerKey":"..."}}}
//	crc32c 5e3a9b1c
//
// It holds salts and derived keys, never passwords; still, keep it
// readable by the broker only (it is written 0600).
//
// A cluster node keeps them in the cluster's metadata log instead
// (StartNode gives it a SCRAMFile whose cluster store is that), the same
// on every node.
type SCRAMFile struct {
	path  string
	creds map[string]map[string]scramCredential // as loaded; under Server.scramMu
	// cluster, on a cluster node, saves to the metadata log; version is
	// the version of creds there (under Server.scramMu).
	cluster *settingsStore
	version int64
}

type scramFileCred struct {
	Salt                 []byte
	Iterations           int
	StoredKey, ServerKey []byte
}

// scramHeader is the first line of a SCRAMFile.
const scramHeader = "spool-scram 1"

// ErrBadSCRAMFile means the SCRAM credentials file is damaged.
var ErrBadSCRAMFile = errors.New("transport: SCRAM credentials file is damaged")

// OpenSCRAMFile reads the credentials file at path (none yet if it does
// not exist).
func OpenSCRAMFile(path string) (*SCRAMFile, error) {
	f := &SCRAMFile{path: path, creds: map[string]map[string]scramCredential{}}
	data, err := vfs.ReadFile(vfs.Default, path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, err
	}
	bad := func(why string) (*SCRAMFile, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrBadSCRAMFile, path, why)
	}
	js, err := crcfile.Decode(data, scramHeader)
	if err != nil {
		return bad(err.Error())
	}
	if f.creds, err = decodeSCRAM(js); err != nil {
		return bad(err.Error())
	}
	return f, nil
}

// decodeSCRAM decodes what encodeSCRAM encoded.
func decodeSCRAM(js []byte) (map[string]map[string]scramCredential, error) {
	var raw map[string]map[string]scramFileCred
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, err
	}
	creds := map[string]map[string]scramCredential{}
	for mech, users := range raw {
		if scramMechanismCode(mech) == 0 {
			return nil, fmt.Errorf("unknown mechanism %s", mech)
		}
		creds[mech] = map[string]scramCredential{}
		for user, c := range users {
			if user == "" || c.Iterations < scramMinIterations || c.Iterations > scramMaxIterations || len(c.Salt) == 0 ||
				len(c.StoredKey) != scramHash(mech)().Size() || len(c.ServerKey) != scramHash(mech)().Size() {
				return nil, fmt.Errorf("bad %s credential for user %q", mech, user)
			}
			creds[mech][user] = scramCredential{salt: c.Salt, iterations: c.Iterations, storedKey: c.StoredKey, serverKey: c.ServerKey}
		}
	}
	return creds, nil
}

// encodeSCRAM encodes credentials as the file (and the metadata log)
// keeps them.
func encodeSCRAM(creds map[string]map[string]scramCredential) ([]byte, error) {
	raw := map[string]map[string]scramFileCred{}
	for mech, users := range creds {
		if len(users) == 0 {
			continue
		}
		raw[mech] = map[string]scramFileCred{}
		for user, c := range users {
			raw[mech][user] = scramFileCred{Salt: c.salt, Iterations: c.iterations, StoredKey: c.storedKey, ServerKey: c.serverKey}
		}
	}
	return json.Marshal(raw)
}

// saveAt stores creds, the managed credentials after a change: in the
// file, or through the cluster's controller as version base+1 (refused
// with controller.ErrConfigChanged if another node changed them
// meanwhile). Called with Server.scramAlterMu.
func (f *SCRAMFile) saveAt(creds map[string]map[string]scramCredential, base int64) error {
	js, err := encodeSCRAM(creds)
	if err != nil {
		return err
	}
	if f.cluster != nil {
		return f.cluster.saveAt(js, base)
	}
	return vfs.WriteFileAtomic(vfs.Default, f.path, crcfile.Encode(scramHeader, js))
}

// syncSCRAM installs SCRAM credentials another node saved in the
// metadata log as version: the configured users' (Options.SASL) with
// these over them, as at start.
func (s *Server) syncSCRAM(creds map[string]map[string]scramCredential, version int64) error {
	base := cloneCreds(s.scramConfigured)
	s.scramMu.Lock()
	defer s.scramMu.Unlock()
	f := s.opts.SCRAMFile
	if f == nil || version <= f.version {
		return nil
	}
	for mech, users := range creds {
		if base[mech] == nil {
			base[mech] = map[string]scramCredential{}
		}
		maps.Copy(base[mech], users)
	}
	s.scram, f.creds, f.version = base, creds, version
	return nil
}

// scramVersion is the version of the managed credentials held (0 without
// a cluster).
func (s *Server) scramVersion() int64 {
	s.scramMu.RLock()
	defer s.scramMu.RUnlock()
	if f := s.opts.SCRAMFile; f != nil {
		return f.version
	}
	return 0
}
