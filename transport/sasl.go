package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// SASL authentication, server side: the PLAIN mechanism (RFC 4616) and
// SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's
// PlainSaslServer and ScramSaslServer implement them.
//
// A connection to a server with Options.SASL starts unauthenticated: only
// ApiVersions, SaslHandshake and SaslAuthenticate are served (conn.go closes
// it on anything else) and frames are bounded by MaxPreAuthBytes.
// SaslHandshake picks the mechanism (17_sasl_handshake.go); the client's
// tokens then come wrapped in SaslAuthenticate requests (handshake v1,
// 36_sasl_authenticate.go) or, after a v0 handshake, as bare size-prefixed
// frames answered the same way. A failure is answered with
// SASL_AUTHENTICATION_FAILED and a message (not after a v0 handshake,
// which has no way to carry one) and the connection closes.
//
// SCRAM exchange (RFC 5802 section 3):
//
//	client-first  n,[a=authzid],n=user,r=cnonce[,ext...]
//	server-first  r=cnonce+snonce,s=base64(salt),i=4096
//	client-final  c=base64(gs2-header),r=cnonce+snonce[,ext...],p=base64(proof)
//	server-final  v=base64(ServerSignature)
//
// The server keeps, per user, only the salt, StoredKey = H(HMAC(SP, "Client
// Key")) and ServerKey = HMAC(SP, "Server Key"), SP being the salted
// password PBKDF2(password, salt, 4096); the client proves it knows SP by
// ClientKey = proof XOR HMAC(StoredKey, AuthMessage), H(ClientKey) =
// StoredKey. An unknown user gets a salt derived from its name and fails
// only at the proof, so a client cannot tell which users exist.

// SASL mechanism names.
const (
	mechPlain       = "PLAIN"
	mechSCRAMSHA256 = "SCRAM-SHA-256"
	mechSCRAMSHA512 = "SCRAM-SHA-512"
)

const (
	scramIterations = 4096 // Kafka's default, and the minimum clients accept
	scramSaltBytes  = 32
	scramNonceBytes = 24
)

// scramCredential is what the server keeps of a SCRAM user's password.
type scramCredential struct {
	salt                 []byte
	iterations           int
	storedKey, serverKey []byte
}

func scramHash(mech string) func() hash.Hash {
	if mech == mechSCRAMSHA512 {
		return sha512.New
	}
	return sha256.New
}

// newSCRAMCredential salts and hashes a password.
func newSCRAMCredential(mech, password string, salt []byte, iterations int) (scramCredential, error) {
	h := scramHash(mech)
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return scramCredential{}, err
	}
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	stored := h()
	stored.Write(clientKey)
	return scramCredential{
		salt: salt, iterations: iterations,
		storedKey: stored.Sum(nil), serverKey: hmacOf(h, salted, []byte("Server Key")),
	}, nil
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

// scramCredentials checks the SASL configuration and derives the SCRAM
// credentials of its users, by mechanism then user.
func scramCredentials(s *SASL) (map[string]map[string]scramCredential, error) {
	if s == nil {
		return nil, nil
	}
	if len(s.Plain)+len(s.SCRAMSHA256)+len(s.SCRAMSHA512) == 0 {
		return nil, errors.New("transport: SASL has no users: no client could authenticate")
	}
	for mech, users := range map[string]map[string]string{mechPlain: s.Plain, mechSCRAMSHA256: s.SCRAMSHA256, mechSCRAMSHA512: s.SCRAMSHA512} {
		for user, pass := range users {
			if user == "" || pass == "" {
				return nil, fmt.Errorf("transport: SASL %s user %q: empty user name or password", mech, user)
			}
		}
	}
	out := map[string]map[string]scramCredential{}
	for mech, users := range map[string]map[string]string{mechSCRAMSHA256: s.SCRAMSHA256, mechSCRAMSHA512: s.SCRAMSHA512} {
		if len(users) == 0 {
			continue
		}
		out[mech] = make(map[string]scramCredential, len(users))
		for user, pass := range users {
			salt := make([]byte, scramSaltBytes)
			_, _ = rand.Read(salt)
			cred, err := newSCRAMCredential(mech, pass, salt, scramIterations)
			if err != nil {
				return nil, fmt.Errorf("transport: SASL %s user %q: %w", mech, user, err)
			}
			out[mech][user] = cred
		}
	}
	return out, nil
}

// saslMechanisms lists the enabled mechanisms: those with users.
func (s *Server) saslMechanisms() []string {
	mechs := []string{}
	if s.opts.SASL == nil {
		return mechs
	}
	if len(s.opts.SASL.Plain) > 0 {
		mechs = append(mechs, mechPlain)
	}
	if len(s.scramUsers(mechSCRAMSHA256)) > 0 {
		mechs = append(mechs, mechSCRAMSHA256)
	}
	if len(s.scramUsers(mechSCRAMSHA512)) > 0 {
		mechs = append(mechs, mechSCRAMSHA512)
	}
	return mechs
}

// errSASLFailed wraps every authentication failure; the detail is logged,
// never sent (Kafka sends a fixed message, so as not to tell which users
// exist).
var errSASLFailed = errors.New("transport: SASL authentication failed")

func saslFailed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errSASLFailed, fmt.Sprintf(format, args...))
}

// saslFailureMessage is the message a client gets, as Kafka words it.
func saslFailureMessage(mech string) string {
	if mech == mechPlain {
		return "Authentication failed: Invalid username or password"
	}
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mech
}

// saslStep feeds one client token to the mechanism chosen in the handshake
// and returns the server's token; done means the client is authenticated.
func (c *conn) saslStep(token []byte) (reply []byte, done bool, err error) {
	switch c.saslMech {
	case mechPlain:
		user, err := plainAuthenticate(c.s.opts.SASL.Plain, token)
		if err != nil {
			return nil, false, err
		}
		c.setPrincipal("User:" + user)
		return []byte{}, true, nil
	case mechSCRAMSHA256, mechSCRAMSHA512:
		if c.scram == nil {
			c.scram = newSCRAMServer(c.saslMech, c.s.scramUsers(c.saslMech))
		}
		reply, done, err := c.scram.next(token)
		if done && err == nil {
			c.setPrincipal("User:" + c.scram.user)
		}
		return reply, done, err
	}
	return nil, false, saslFailed("no mechanism chosen")
}

// plainAuthenticate checks a PLAIN token, "authzid NUL user NUL password",
// and returns the user. As Kafka, it accepts an authorization id only if it
// is the user's own.
func plainAuthenticate(users map[string]string, token []byte) (string, error) {
	parts := bytes.Split(token, []byte{0})
	if len(parts) != 3 {
		return "", saslFailed("PLAIN: token has %d NUL-separated parts, want 3", len(parts))
	}
	authzid, user, pass := string(parts[0]), string(parts[1]), parts[2]
	if user == "" || len(pass) == 0 {
		return "", saslFailed("PLAIN: empty user name or password")
	}
	if authzid != "" && authzid != user {
		return "", saslFailed("PLAIN: authorization id %q is not user %q", authzid, user)
	}
	want, ok := users[user]
	if subtle.ConstantTimeCompare([]byte(want), pass) != 1 || !ok {
		return "", saslFailed("PLAIN: wrong password or unknown user %q", user)
	}
	return user, nil
}

// scramServer is one connection's SCRAM exchange.
type scramServer struct {
	mech  string
	hash  func() hash.Hash
	users map[string]scramCredential
	step  int

	user            string
	cred            scramCredential
	known           bool
	gs2Header       string
	clientFirstBare string
	serverFirst     string
	nonce           string // client nonce + server nonce
	cnonce          string // the client's nonce alone
}

func newSCRAMServer(mech string, users map[string]scramCredential) *scramServer {
	return &scramServer{mech: mech, hash: scramHash(mech), users: users}
}

// next takes the client's next message and returns the server's.
func (s *scramServer) next(msg []byte) (reply []byte, done bool, err error) {
	step := s.step
	s.step++
	switch step {
	case 0:
		reply, err := s.clientFirst(string(msg))
		return reply, false, err
	case 1:
		reply, err := s.clientFinal(string(msg))
		return reply, err == nil, err
	}
	return nil, false, saslFailed("%s: exchange already finished", s.mech)
}

func (s *scramServer) clientFirst(msg string) ([]byte, error) {
	// gs2-header: a channel-binding flag and an optional authzid.
	var cbind string
	switch {
	case strings.HasPrefix(msg, "n,"), strings.HasPrefix(msg, "y,"):
		cbind, msg = msg[:2], msg[2:]
	default:
		return nil, saslFailed("%s: channel binding is not supported", s.mech)
	}
	authzField, bare, ok := strings.Cut(msg, ",")
	if !ok {
		return nil, saslFailed("%s: client-first-message has no gs2 header", s.mech)
	}
	var authzid string
	if authzField != "" {
		v, ok := strings.CutPrefix(authzField, "a=")
		if !ok {
			return nil, saslFailed("%s: bad authzid %q", s.mech, authzField)
		}
		if authzid, ok = scramUnescape(v); !ok {
			return nil, saslFailed("%s: bad authzid %q", s.mech, authzField)
		}
	}
	s.gs2Header = cbind + authzField + ","
	s.clientFirstBare = bare

	fields := strings.Split(bare, ",")
	if len(fields) < 2 {
		return nil, saslFailed("%s: client-first-message-bare %q", s.mech, bare)
	}
	if strings.HasPrefix(fields[0], "m=") {
		return nil, saslFailed("%s: mandatory extension %q is not supported", s.mech, fields[0])
	}
	name, ok := strings.CutPrefix(fields[0], "n=")
	if !ok {
		return nil, saslFailed("%s: no user name in %q", s.mech, bare)
	}
	user, ok := scramUnescape(name)
	if !ok || user == "" {
		return nil, saslFailed("%s: bad user name %q", s.mech, name)
	}
	cnonce, ok := strings.CutPrefix(fields[1], "r=")
	if !ok || !validNonce(cnonce) {
		return nil, saslFailed("%s: bad client nonce %q", s.mech, fields[1])
	}
	for _, ext := range fields[2:] {
		k, v, ok := strings.Cut(ext, "=")
		if !ok || k == "" {
			return nil, saslFailed("%s: bad extension %q", s.mech, ext)
		}
		if k == "tokenauth" && strings.EqualFold(v, "true") {
			return nil, saslFailed("%s: delegation tokens are not supported", s.mech)
		}
	}
	if authzid != "" && authzid != user {
		return nil, saslFailed("%s: authorization id %q is not user %q", s.mech, authzid, user)
	}
	s.user = user
	s.cred, s.known = s.users[user]
	if !s.known {
		s.cred = s.unknownUser(user)
	}
	var sn [scramNonceBytes]byte
	_, _ = rand.Read(sn[:])
	s.cnonce = cnonce
	s.nonce = cnonce + base64.RawStdEncoding.EncodeToString(sn[:])
	s.serverFirst = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(s.cred.salt) + ",i=" + strconv.Itoa(s.cred.iterations)
	return []byte(s.serverFirst), nil
}

func (s *scramServer) clientFinal(msg string) ([]byte, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, saslFailed("%s: client-final-message has no proof", s.mech)
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	fields := strings.Split(withoutProof, ",")
	if len(fields) < 2 {
		return nil, saslFailed("%s: client-final-message %q", s.mech, withoutProof)
	}
	if fields[0] != "c="+base64.StdEncoding.EncodeToString([]byte(s.gs2Header)) {
		return nil, saslFailed("%s: channel binding %q does not match the gs2 header", s.mech, fields[0])
	}
	// librdkafka before 2.6.1 sends its own nonce twice (client nonce +
	// client nonce + server nonce; confluentinc/librdkafka#4895), which
	// Kafka 3.8.1-3.9 accepted. Accept exactly that form too: the proof is
	// computed over the bytes as sent, so it still authenticates.
	if fields[1] != "r="+s.nonce && fields[1] != "r="+s.cnonce+s.nonce {
		return nil, saslFailed("%s: nonce mismatch", s.mech)
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != len(s.cred.storedKey) {
		return nil, saslFailed("%s: bad proof", s.mech)
	}
	authMessage := []byte(s.clientFirstBare + "," + s.serverFirst + "," + withoutProof)
	clientKey := hmacOf(s.hash, s.cred.storedKey, authMessage) // the client signature...
	for i := range clientKey {
		clientKey[i] ^= proof[i] // ...XOR the proof
	}
	h := s.hash()
	h.Write(clientKey)
	if !hmac.Equal(h.Sum(nil), s.cred.storedKey) || !s.known {
		return nil, saslFailed("%s: wrong password or unknown user %q", s.mech, s.user)
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacOf(s.hash, s.cred.serverKey, authMessage))), nil
}

// scramFakeKey keys the salts of users that do not exist.
var scramFakeKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}()

// unknownUser is a credential no password matches, with a salt stable per
// user name, as an existing user's is.
func (s *scramServer) unknownUser(user string) scramCredential {
	salt := hmacOf(sha256.New, scramFakeKey, []byte(s.mech+"\x00"+user))
	return scramCredential{
		salt: salt, iterations: scramIterations,
		storedKey: hmacOf(s.hash, scramFakeKey, []byte("stored\x00"+user)),
		serverKey: hmacOf(s.hash, scramFakeKey, []byte("server\x00"+user)),
	}
}

// scramUnescape decodes a saslname: "=2C" is ',' and "=3D" is '='; any
// other '=' is an error.
func scramUnescape(s string) (string, bool) {
	if !strings.Contains(s, "=") {
		return s, true
	}
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		s = s[i+3:]
	}
	return b.String(), true
}

// validNonce: printable ASCII but ','.
func validNonce(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}
