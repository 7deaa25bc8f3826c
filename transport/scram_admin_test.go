package transport

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/internal/crcfile"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SCRAM credentials managed over the protocol: a user added with
// AlterUserScramCredentials authenticates at once, is described without
// its salt or keys, survives a restart (the SCRAM file), and is refused
// once deleted; bad upsertions are refused with Kafka's codes and change
// nothing.
func TestSCRAMCredentialsOverTheProtocol(t *testing.T) {
	dir := t.TempDir()
	file, err := OpenSCRAMFile(filepath.Join(dir, "scram"))
	require.NoError(t, err)
	opts := Options{SASL: &SASL{SCRAMSHA512: map[string]string{"admin": "root-pw"}}, SCRAMFile: file}
	_, _, addr := testServer(t, spool.Options{}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "admin", Pass: "root-pw"}.AsSha512Mechanism()))
	require.NoError(t, err)
	defer admin.Close()
	canLogIn := func(addr, user, pass string) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()), kgo.RetryTimeout(time.Second))
		require.NoError(t, err)
		defer cl.Close()
		return cl.Ping(ctx)
	}
	require.Error(t, canLogIn(addr, "bob", "bob-pw"), "no such user yet")

	salt := []byte("0123456789abcdef")
	salted, err := pbkdf2.Key(sha256.New, "bob-pw", salt, 4096, 32)
	require.NoError(t, err)
	alter := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	alter.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{
		{Name: "bob", Mechanism: 1, Iterations: 4096, Salt: salt, SaltedPassword: salted},
		{Name: "few", Mechanism: 1, Iterations: 100, Salt: salt, SaltedPassword: salted},
		{Name: "odd", Mechanism: 9, Iterations: 4096, Salt: salt, SaltedPassword: salted},
		{Name: "short", Mechanism: 1, Iterations: 4096, Salt: salt, SaltedPassword: salted[:5]},
	}
	alter.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "ghost", Mechanism: 1}}
	resp, err := alter.RequestWith(ctx, admin)
	require.NoError(t, err)
	codes := map[string]int16{}
	for _, r := range resp.Results {
		codes[r.User] = r.ErrorCode
	}
	require.Equal(t, map[string]int16{"bob": 0, "few": kerr.UnacceptableCredential.Code, "odd": kerr.UnsupportedSaslMechanism.Code,
		"short": kerr.UnacceptableCredential.Code, "ghost": kerr.ResourceNotFound.Code}, codes)
	require.NoError(t, canLogIn(addr, "bob", "bob-pw"), "the new credential works at once")
	require.Error(t, canLogIn(addr, "bob", "wrong"))

	desc, err := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest().RequestWith(ctx, admin)
	require.NoError(t, err)
	users := map[string][]kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{}
	for _, r := range desc.Results {
		require.Zero(t, r.ErrorCode)
		users[r.User] = r.CredentialInfos
	}
	require.Equal(t, []kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{{Mechanism: 1, Iterations: 4096}}, users["bob"])
	require.Contains(t, users, "admin")
	require.NotContains(t, users, "few")

	// A second server on the same file knows bob.
	file2, err := OpenSCRAMFile(filepath.Join(dir, "scram"))
	require.NoError(t, err)
	_, _, addr2 := testServer(t, spool.Options{}, Options{SASL: &SASL{SCRAMSHA512: map[string]string{"admin": "root-pw"}}, SCRAMFile: file2})
	require.NoError(t, canLogIn(addr2, "bob", "bob-pw"), "kept in the SCRAM file")

	del := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	del.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "bob", Mechanism: 1}}
	dresp, err := del.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.Zero(t, dresp.Results[0].ErrorCode)
	require.Error(t, canLogIn(addr, "bob", "bob-pw"), "deleted")
	file3, err := OpenSCRAMFile(filepath.Join(dir, "scram"))
	require.NoError(t, err)
	require.Empty(t, file3.creds[mechSCRAMSHA256], "the file forgot bob; admin (a configured user) was never in it")
	require.Empty(t, file3.creds[mechSCRAMSHA512])
}

// A damaged SCRAM credentials file refuses to load - a flipped byte, a
// credential with the wrong key size, an unknown mechanism - rather than
// start without users or with a broken one.
func TestSCRAMFileDamaged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scram")
	f, err := OpenSCRAMFile(path)
	require.NoError(t, err)
	key := make([]byte, 32)
	good := map[string]map[string]scramCredential{"SCRAM-SHA-256": {"bob": {salt: []byte("s"), iterations: 4096, storedKey: key, serverKey: key}}}
	require.NoError(t, f.saveAt(good, 0))
	f, err = OpenSCRAMFile(path)
	require.NoError(t, err)
	require.Len(t, f.creds["SCRAM-SHA-256"], 1)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	flipped := bytes.Clone(data)
	flipped[len(scramHeader)+5] ^= 0x01
	require.NoError(t, os.WriteFile(path, flipped, 0o600))
	_, err = OpenSCRAMFile(path)
	require.ErrorIs(t, err, ErrBadSCRAMFile)

	for name, creds := range map[string]string{
		"short key":         `{"SCRAM-SHA-256":{"bob":{"Salt":"cw==","Iterations":4096,"StoredKey":"AAAA","ServerKey":"AAAA"}}}`,
		"unknown mechanism": `{"SCRAM-MD5":{}}`,
		"few iterations":    `{"SCRAM-SHA-256":{"bob":{"Salt":"cw==","Iterations":1,"StoredKey":"` + b64(key) + `","ServerKey":"` + b64(key) + `"}}}`,
	} {
		require.NoError(t, os.WriteFile(path, crcfile.Encode(scramHeader, []byte(creds)), 0o600))
		_, err = OpenSCRAMFile(path)
		require.ErrorIs(t, err, ErrBadSCRAMFile, name)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
