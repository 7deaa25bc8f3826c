package transport

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

var saslUsers = &SASL{
	Plain:       map[string]string{"alice": "alice-secret", "a,b=c": "odd"},
	SCRAMSHA256: map[string]string{"bob": "bob-secret", "a,b=c": "odd"},
	SCRAMSHA512: map[string]string{"carol": "carol-secret"},
}

func saslServer(t testing.TB, opts Options) string {
	t.Helper()
	if opts.SASL == nil {
		opts.SASL = saslUsers
	}
	_, _, addr := testServer(t, spool.Options{}, opts)
	return addr
}

// saslMetadata connects a franz-go client with mech and asks for metadata.
func saslMetadata(t testing.TB, addr string, mech sasl.Mechanism) error {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(mech), kgo.RequestRetries(0))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cl.Request(ctx, kmsg.NewPtrMetadataRequest())
	return err
}

func TestSASLWithFranzGo(t *testing.T) {
	addr := saslServer(t, Options{})
	good := map[string]sasl.Mechanism{
		"PLAIN":                plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(),
		"PLAIN escaped user":   plain.Auth{User: "a,b=c", Pass: "odd"}.AsMechanism(),
		"PLAIN own authzid":    plain.Auth{Zid: "alice", User: "alice", Pass: "alice-secret"}.AsMechanism(),
		"SCRAM-SHA-256":        scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism(),
		"SCRAM-SHA-256 commas": scram.Auth{User: "a,b=c", Pass: "odd"}.AsSha256Mechanism(),
		"SCRAM-SHA-512":        scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha512Mechanism(),
	}
	for name, mech := range good {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, saslMetadata(t, addr, mech))
		})
	}
	bad := map[string]sasl.Mechanism{
		"PLAIN wrong password":         plain.Auth{User: "alice", Pass: "nope"}.AsMechanism(),
		"PLAIN unknown user":           plain.Auth{User: "mallory", Pass: "alice-secret"}.AsMechanism(),
		"PLAIN other authzid":          plain.Auth{Zid: "bob", User: "alice", Pass: "alice-secret"}.AsMechanism(),
		"PLAIN SCRAM user":             plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism(),
		"SCRAM-SHA-256 wrong password": scram.Auth{User: "bob", Pass: "nope"}.AsSha256Mechanism(),
		"SCRAM-SHA-256 unknown user":   scram.Auth{User: "mallory", Pass: "x"}.AsSha256Mechanism(),
		"SCRAM-SHA-256 other authzid":  scram.Auth{Zid: "carol", User: "bob", Pass: "bob-secret"}.AsSha256Mechanism(),
		"SCRAM-SHA-256 delegation":     scram.Auth{User: "bob", Pass: "bob-secret", IsToken: true}.AsSha256Mechanism(),
		"SCRAM-SHA-512 wrong password": scram.Auth{User: "carol", Pass: "nope"}.AsSha512Mechanism(),
		"SCRAM-SHA-512 256 user":       scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism(),
	}
	for name, mech := range bad {
		t.Run(name, func(t *testing.T) {
			err := saslMetadata(t, addr, mech)
			require.ErrorIs(t, err, kerr.SaslAuthenticationFailed)
		})
	}
}

// saslDo is adminRoundTrip for a test that expects an answer.
func saslDo[Resp kmsg.Response](t testing.TB, c net.Conn, version int16, req kmsg.Request) Resp {
	t.Helper()
	return adminDo[Resp](t, c, version, req)
}

// requireClosed checks that the server closed c (after any answers
// already sent).
func requireClosed(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(c)
	require.NoError(t, err, "the connection was not closed")
}

func handshake(t testing.TB, c net.Conn, version int16, mech string) *kmsg.SASLHandshakeResponse {
	t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Mechanism = mech
	return saslDo[*kmsg.SASLHandshakeResponse](t, c, version, req)
}

func authenticate(t testing.TB, c net.Conn, version int16, token []byte) *kmsg.SASLAuthenticateResponse {
	t.Helper()
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SASLAuthBytes = token
	return saslDo[*kmsg.SASLAuthenticateResponse](t, c, version, req)
}

func plainToken(user, pass string) []byte { return []byte("\x00" + user + "\x00" + pass) }

func TestSASLProtocol(t *testing.T) {
	addr := saslServer(t, Options{MaxPreAuthBytes: 1024})
	all := []string{mechPlain, mechSCRAMSHA256, mechSCRAMSHA512}

	t.Run("ApiVersions then PLAIN at every version", func(t *testing.T) {
		for _, v := range []int16{0, 1, 2} {
			c := adminDial(t, addr)
			av := saslDo[*kmsg.ApiVersionsResponse](t, c, 2, kmsg.NewPtrApiVersionsRequest())
			require.Zero(t, av.ErrorCode)
			hs := handshake(t, c, 1, mechPlain)
			require.Zero(t, hs.ErrorCode)
			require.Equal(t, all, hs.SupportedMechanisms)
			resp := authenticate(t, c, v, plainToken("alice", "alice-secret"))
			require.Zero(t, resp.ErrorCode)
			require.Zero(t, resp.SessionLifetimeMillis)
			md := saslDo[*kmsg.MetadataResponse](t, c, 4, kmsg.NewPtrMetadataRequest())
			require.Len(t, md.Brokers, 1)
			// Authenticated: another handshake is refused, the connection stays.
			require.Equal(t, errIllegalSASLState, handshake(t, c, 1, mechPlain).ErrorCode)
			require.Equal(t, errIllegalSASLState, authenticate(t, c, v, plainToken("alice", "alice-secret")).ErrorCode)
			saslDo[*kmsg.MetadataResponse](t, c, 4, kmsg.NewPtrMetadataRequest())
		}
	})
	t.Run("bad password: error 58 with a message, then closed", func(t *testing.T) {
		c := adminDial(t, addr)
		require.Zero(t, handshake(t, c, 1, mechPlain).ErrorCode)
		resp := authenticate(t, c, 1, plainToken("alice", "wrong"))
		require.Equal(t, errSASLAuthenticationFailed, resp.ErrorCode)
		require.Equal(t, "Authentication failed: Invalid username or password", *resp.ErrorMessage)
		requireClosed(t, c)
	})
	t.Run("request before authentication closes", func(t *testing.T) {
		c := adminDial(t, addr)
		_, err := adminRoundTrip(c, 4, kmsg.NewPtrMetadataRequest())
		require.Error(t, err)
		c = adminDial(t, addr)
		require.Zero(t, handshake(t, c, 1, mechPlain).ErrorCode)
		_, err = adminRoundTrip(c, 4, kmsg.NewPtrMetadataRequest())
		require.Error(t, err)
	})
	t.Run("oversize pre-auth frame closes", func(t *testing.T) {
		c := adminDial(t, addr)
		require.Zero(t, handshake(t, c, 1, mechPlain).ErrorCode)
		_, err := adminRoundTrip(c, 2, &kmsg.SASLAuthenticateRequest{SASLAuthBytes: make([]byte, 2000)})
		require.Error(t, err)
	})
	t.Run("unknown mechanism: the list, then closed", func(t *testing.T) {
		c := adminDial(t, addr)
		hs := handshake(t, c, 1, "GSSAPI")
		require.Equal(t, errUnsupportedSASLMechanism, hs.ErrorCode)
		require.Equal(t, all, hs.SupportedMechanisms)
		requireClosed(t, c)
	})
	t.Run("authenticate before handshake", func(t *testing.T) {
		c := adminDial(t, addr)
		resp := authenticate(t, c, 1, plainToken("alice", "alice-secret"))
		require.Equal(t, errIllegalSASLState, resp.ErrorCode)
		requireClosed(t, c)
	})
	t.Run("second handshake", func(t *testing.T) {
		c := adminDial(t, addr)
		require.Zero(t, handshake(t, c, 1, mechPlain).ErrorCode)
		require.Equal(t, errIllegalSASLState, handshake(t, c, 1, mechSCRAMSHA256).ErrorCode)
		requireClosed(t, c)
	})
	t.Run("SCRAM by hand, bad nonce", func(t *testing.T) {
		c := adminDial(t, addr)
		require.Zero(t, handshake(t, c, 1, mechSCRAMSHA256).ErrorCode)
		first := authenticate(t, c, 2, []byte("n,,n=bob,r=abcdef"))
		require.Zero(t, first.ErrorCode)
		require.Regexp(t, `^r=abcdef[^,]+,s=[^,]+,i=4096$`, string(first.SASLAuthBytes))
		resp := authenticate(t, c, 2, []byte("c=biws,r=abcdefWRONG,p="+base64.StdEncoding.EncodeToString(make([]byte, 32))))
		require.Equal(t, errSASLAuthenticationFailed, resp.ErrorCode)
		require.Contains(t, *resp.ErrorMessage, "SCRAM-SHA-256")
		requireClosed(t, c)
	})
}

// A server without SASL answers the SASL APIs as Kafka's PLAINTEXT
// listener does: ILLEGAL_SASL_STATE, and the connection stays.
func TestSASLNotEnabled(t *testing.T) {
	_, _, addr := testServer(t, spool.Options{}, Options{})
	c := adminDial(t, addr)
	hs := handshake(t, c, 1, mechPlain)
	require.Equal(t, errIllegalSASLState, hs.ErrorCode)
	require.Empty(t, hs.SupportedMechanisms)
	require.Equal(t, errIllegalSASLState, authenticate(t, c, 1, plainToken("a", "b")).ErrorCode)
	require.Equal(t, errIllegalSASLState, handshake(t, c, 0, mechPlain).ErrorCode)
	saslDo[*kmsg.MetadataResponse](t, c, 1, kmsg.NewPtrMetadataRequest())

	// kgo with SASL against it fails cleanly.
	err := saslMetadata(t, addr, plain.Auth{User: "a", Pass: "b"}.AsMechanism())
	require.ErrorIs(t, err, kerr.IllegalSaslState)
}

// rawToken writes a bare size-prefixed SASL token (after SaslHandshake v0)
// and reads the answer.
func rawToken(c net.Conn, token []byte) ([]byte, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(token))), token...)); err != nil {
		return nil, err
	}
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

// After SaslHandshake v0 the tokens are bare frames.
func TestSASLHandshakeV0RawTokens(t *testing.T) {
	addr := saslServer(t, Options{MaxPreAuthBytes: 1024})

	// PLAIN: an empty answer, then requests.
	c := adminDial(t, addr)
	hs := handshake(t, c, 0, mechPlain)
	require.Zero(t, hs.ErrorCode)
	reply, err := rawToken(c, plainToken("alice", "alice-secret"))
	require.NoError(t, err)
	require.Empty(t, reply)
	saslDo[*kmsg.MetadataResponse](t, c, 1, kmsg.NewPtrMetadataRequest())

	// A short token (less than a request header) is a token too.
	c = adminDial(t, addr)
	require.Zero(t, handshake(t, c, 0, mechPlain).ErrorCode)
	_, err = rawToken(c, []byte{0, 'a'})
	require.Error(t, err, "a bad token closes without an answer")

	// Bad password: closed without an answer.
	c = adminDial(t, addr)
	require.Zero(t, handshake(t, c, 0, mechPlain).ErrorCode)
	_, err = rawToken(c, plainToken("alice", "wrong"))
	require.Error(t, err)

	// Oversize token.
	c = adminDial(t, addr)
	require.Zero(t, handshake(t, c, 0, mechPlain).ErrorCode)
	_, err = rawToken(c, make([]byte, 2000))
	require.Error(t, err)

	// SCRAM-SHA-512 through franz-go's client session, over raw frames.
	for _, auth := range []struct {
		pass string
		ok   bool
	}{{"carol-secret", true}, {"wrong", false}} {
		c = adminDial(t, addr)
		require.Zero(t, handshake(t, c, 0, mechSCRAMSHA512).ErrorCode)
		session, first, err := scram.Auth{User: "carol", Pass: auth.pass}.AsSha512Mechanism().Authenticate(context.Background(), addr)
		require.NoError(t, err)
		serverFirst, err := rawToken(c, first)
		require.NoError(t, err)
		done, final, err := session.Challenge(serverFirst)
		require.NoError(t, err)
		require.False(t, done)
		serverFinal, err := rawToken(c, final)
		if !auth.ok {
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		done, _, err = session.Challenge(serverFinal)
		require.NoError(t, err)
		require.True(t, done)
		saslDo[*kmsg.MetadataResponse](t, c, 1, kmsg.NewPtrMetadataRequest())
	}
}

// RFC 7677 section 3's example exchange, with its nonces.
func TestSCRAMSHA256RFC7677(t *testing.T) {
	salt, err := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	require.NoError(t, err)
	cred, err := newSCRAMCredential(mechSCRAMSHA256, "pencil", salt, 4096)
	require.NoError(t, err)
	s := newSCRAMServer(mechSCRAMSHA256, map[string]scramCredential{"user": cred})
	_, done, err := s.next([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	require.NoError(t, err)
	require.False(t, done)
	// The RFC's server nonce instead of ours.
	s.nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	s.serverFirst = "r=" + s.nonce + ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
	final, done, err := s.next([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", string(final))
	_, _, err = s.next([]byte("more"))
	require.ErrorIs(t, err, errSASLFailed)
}

func TestSCRAMClientFirstChecks(t *testing.T) {
	cred, err := newSCRAMCredential(mechSCRAMSHA256, "pw", []byte("salt"), 4096)
	require.NoError(t, err)
	for _, msg := range []string{
		"", "n", "p=tls-unique,,n=user,r=abc", "n,,", "n,,r=abc", "n,,n=user", "n,,n=user,r=",
		"n,,n=us=er,r=abc", "n,,m=ext,n=user,r=abc", "n,x=1,n=user,r=abc", "n,a=other,n=user,r=abc",
		"n,,n=user,r=a,b", "n,,n=user,r=ab c", "n,,n=,r=abc", "n,,n=user,r=abc,tokenauth=true",
	} {
		s := newSCRAMServer(mechSCRAMSHA256, map[string]scramCredential{"user": cred})
		_, _, err := s.next([]byte(msg))
		require.ErrorIs(t, err, errSASLFailed, "%q", msg)
	}
	for _, msg := range []string{"n,,n=user,r=abc", "y,,n=user,r=abc", "n,a=user,n=user,r=abc", "n,,n=user,r=abc,ext=1"} {
		s := newSCRAMServer(mechSCRAMSHA256, map[string]scramCredential{"user": cred})
		_, _, err := s.next([]byte(msg))
		require.NoError(t, err, "%q", msg)
	}
	// An unknown user gets a salt too, the same each time.
	s := newSCRAMServer(mechSCRAMSHA256, map[string]scramCredential{})
	a, _, err := s.next([]byte("n,,n=ghost,r=abc"))
	require.NoError(t, err)
	s = newSCRAMServer(mechSCRAMSHA256, map[string]scramCredential{})
	b, _, err := s.next([]byte("n,,n=ghost,r=abc"))
	require.NoError(t, err)
	salt := func(m []byte) string { return string(m[len("r=abc")+32:]) }
	require.Equal(t, salt(a), salt(b))
}

func TestSASLConfigErrors(t *testing.T) {
	for _, cfg := range []*SASL{
		{},
		{Plain: map[string]string{"": "x"}},
		{SCRAMSHA256: map[string]string{"u": ""}},
	} {
		_, err := scramCredentials(cfg)
		require.Error(t, err, "%+v", cfg)
	}
	creds, err := scramCredentials(&SASL{Plain: map[string]string{"u": "p"}, SCRAMSHA512: map[string]string{"u": "p"}})
	require.NoError(t, err)
	require.Len(t, creds, 1)
	require.Len(t, creds[mechSCRAMSHA512]["u"].storedKey, 64)
	b, err := spool.Open(t.TempDir(), spool.Options{})
	require.NoError(t, err)
	defer b.Close()
	_, err = NewServer(b, Options{SASL: &SASL{}})
	require.Error(t, err)
}

// FuzzSaslAuthenticate feeds arbitrary tokens to every mechanism at every
// step: never a panic, never success without the password.
func FuzzSaslAuthenticate(f *testing.F) {
	f.Add([]byte("\x00alice\x00alice-secret"), uint8(0))
	f.Add([]byte("alice\x00alice\x00alice-secret"), uint8(0))
	f.Add([]byte("n,,n=bob,r=abc"), uint8(1))
	f.Add([]byte("n,a=bob,n=bob,r=abc,ext=1"), uint8(1))
	f.Add([]byte("c=biws,r=abcdef,p=AAAA"), uint8(2))
	f.Add([]byte("c=biws,r=abc"+base64.RawStdEncoding.EncodeToString(make([]byte, scramNonceBytes))+",p="), uint8(2))
	f.Add([]byte("n,,n==2C=3D,r=x"), uint8(3))
	f.Add([]byte{}, uint8(4))
	users := map[string]string{"alice": "alice-secret", "bob": "bob-secret"}
	creds, err := scramCredentials(&SASL{SCRAMSHA256: users, SCRAMSHA512: users})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, token []byte, which uint8) {
		if _, err := plainAuthenticate(users, token); err == nil && string(token) != "\x00alice\x00alice-secret" &&
			string(token) != "alice\x00alice\x00alice-secret" && string(token) != "\x00bob\x00bob-secret" && string(token) != "bob\x00bob\x00bob-secret" {
			t.Fatalf("PLAIN accepted %q", token)
		}
		mech := mechSCRAMSHA256
		if which%2 == 1 {
			mech = mechSCRAMSHA512
		}
		// As the first message.
		s := newSCRAMServer(mech, creds[mech])
		if _, _, err := s.next(token); err == nil {
			// Then as anything after.
			if _, done, err := s.next(token); err == nil || done {
				t.Fatalf("SCRAM accepted %q as a final message", token)
			}
		}
		// As the final message, after a good first one.
		s = newSCRAMServer(mech, creds[mech])
		if _, _, err := s.next([]byte("n,,n=bob,r=abc")); err != nil {
			t.Fatal(err)
		}
		if _, done, err := s.next(token); err == nil || done {
			t.Fatalf("SCRAM accepted %q without the password", token)
		}
	})
}

// TestSCRAMLibrdkafkaRepeatedNonce: librdkafka < 2.6.1 sends its nonce
// twice in the client-final message (confluentinc/librdkafka#4895); that
// exact form authenticates, as with Kafka 3.8.1-3.9, and other nonces do not.
func TestSCRAMLibrdkafkaRepeatedNonce(t *testing.T) {
	salt := []byte("0123456789abcdef")
	cred, err := newSCRAMCredential(mechSCRAMSHA256, "pw", salt, 4096)
	require.NoError(t, err)
	finalWith := func(s *scramServer, nonceField string) string {
		bare := "c=biws," + nonceField
		salted, err := pbkdf2.Key(sha256.New, "pw", salt, 4096, sha256.Size)
		require.NoError(t, err)
		mac := func(key []byte, msg string) []byte {
			h := hmac.New(sha256.New, key)
			h.Write([]byte(msg))
			return h.Sum(nil)
		}
		clientKey := mac(salted, "Client Key")
		stored := sha256.Sum256(clientKey)
		sig := mac(stored[:], s.clientFirstBare+","+s.serverFirst+","+bare)
		proof := make([]byte, len(clientKey))
		for i := range proof {
			proof[i] = clientKey[i] ^ sig[i]
		}
		return bare + ",p=" + base64.StdEncoding.EncodeToString(proof)
	}
	for _, tc := range []struct {
		name  string
		field func(s *scramServer) string
		ok    bool
	}{
		{"RFC form", func(s *scramServer) string { return "r=" + s.nonce }, true},
		{"librdkafka form", func(s *scramServer) string { return "r=" + s.cnonce + s.nonce }, true},
		{"other prefix", func(s *scramServer) string { return "r=x" + s.nonce }, false},
		{"trailing bytes", func(s *scramServer) string { return "r=" + s.nonce + "x" }, false},
		{"client nonce only", func(s *scramServer) string { return "r=" + s.cnonce }, false},
	} {
		s := newSCRAMServer(mechSCRAMSHA256, map[string]scramCredential{"bob": cred})
		_, _, err := s.next([]byte("n,,n=bob,r=clientnonce123"))
		require.NoError(t, err)
		_, done, err := s.next([]byte(finalWith(s, tc.field(s))))
		if tc.ok {
			require.NoError(t, err, tc.name)
			require.True(t, done)
		} else {
			require.ErrorIs(t, err, errSASLFailed, tc.name)
		}
	}
}
