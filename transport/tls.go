package transport

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// TLS on the Kafka listener (Kafka's SSL and SASL_SSL security protocols).
//
// With Options.TLS set every client connection is a TLS connection: the
// server shakes hands before reading the first request (within
// RequestReadTimeout), and a client that does not speak TLS, or presents a
// certificate the configuration does not accept, is disconnected without a
// Kafka answer, as Kafka's SSL transport layer does. With a client
// certificate (mutual TLS) the connection's principal is the certificate's
// subject distinguished name in RFC 2253 form ("CN=alice,OU=eng,O=acme"),
// mapped by Options.SSLPrincipalMappingRules; with SASL as well, the SASL
// user is the principal, as in Kafka.
//
// TLSFiles serves a certificate and key (and the CAs client certificates
// must chain to) from PEM files and picks up new files without a restart:
// rotating a certificate is replacing its files.

// TLSFiles is a TLS server configuration read from PEM files, reloaded when
// they change: a handshake at least a second after the last look checks
// the files' modification times and sizes, and Reload reads them at once
// (spool serve calls it on SIGHUP). A reload that fails keeps the
// configuration that worked, and reports why. Safe for concurrent use.
type TLSFiles struct {
	certFile, keyFile, caFile string
	onError                   func(error)

	mu      sync.Mutex
	cfg     *tls.Config // the current configuration, without GetConfigForClient
	stamps  string      // the files' sizes and modification times when read
	checked time.Time
}

// LoadTLSFiles reads a server certificate chain and its private key (PEM)
// and, if clientCAFile is not empty, the CA certificates (PEM) that client
// certificates must chain to: clients must then present one (mutual TLS).
// TLS 1.2 is the oldest version accepted. onError, if not nil, is told of
// failed reloads.
func LoadTLSFiles(certFile, keyFile, clientCAFile string, onError func(error)) (*TLSFiles, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("transport: TLS needs a certificate file and a key file")
	}
	f := &TLSFiles{certFile: certFile, keyFile: keyFile, caFile: clientCAFile, onError: onError}
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Config returns the tls.Config for Options.TLS: each handshake gets the
// files' current certificate and client CAs.
func (f *TLSFiles) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			f.maybeReload()
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.cfg, nil
		},
	}
}

// PeerConfig returns the client side for a cluster node's connections to
// the other nodes (NodeConfig.PeerTLS): it presents the files' current
// certificate when asked for one, and trusts the client CAs (the nodes'
// certificates are then signed by the CA that signs the clients'), or the
// system's roots when there are none.
func (f *TLSFiles) PeerConfig() *tls.Config {
	f.mu.Lock()
	roots := f.cfg.ClientCAs
	f.mu.Unlock()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			f.maybeReload()
			f.mu.Lock()
			defer f.mu.Unlock()
			return &f.cfg.Certificates[0], nil
		},
	}
}

// Reload reads the files now; on failure the previous configuration stays.
func (f *TLSFiles) Reload() error {
	stamps := f.stampFiles()
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("transport: TLS certificate %s and key %s: %w", f.certFile, f.keyFile, err)
	}
	if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
		return fmt.Errorf("transport: TLS certificate %s expired at %v", f.certFile, cert.Leaf.NotAfter)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return fmt.Errorf("transport: TLS client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("transport: TLS client CA file %s holds no PEM certificate", f.caFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	f.mu.Lock()
	f.cfg, f.stamps, f.checked = cfg, stamps, time.Now()
	f.mu.Unlock()
	return nil
}

// stampFiles describes the files' sizes and modification times.
func (f *TLSFiles) stampFiles() string {
	var b strings.Builder
	for _, name := range []string{f.certFile, f.keyFile, f.caFile} {
		if name == "" {
			continue
		}
		if st, err := os.Stat(name); err == nil {
			fmt.Fprintf(&b, "%s:%d:%d;", name, st.Size(), st.ModTime().UnixNano())
		} else {
			fmt.Fprintf(&b, "%s:missing;", name)
		}
	}
	return b.String()
}

// maybeReload reloads the files if a second has passed since the last look
// and they changed.
func (f *TLSFiles) maybeReload() {
	f.mu.Lock()
	if time.Since(f.checked) < time.Second {
		f.mu.Unlock()
		return
	}
	f.checked = time.Now()
	old := f.stamps
	f.mu.Unlock()
	seen := f.stampFiles()
	if seen == old {
		return
	}
	if err := f.Reload(); err != nil {
		// Not again until they change again - from what was seen before
		// this try: a key written just after it is picked up next time.
		f.mu.Lock()
		f.stamps = seen
		f.mu.Unlock()
		if f.onError != nil {
			f.onError(err)
		}
	}
}

// ErrBadPrincipalRules means SSLPrincipalMappingRules could not be parsed.
var ErrBadPrincipalRules = errors.New("transport: bad ssl.principal.mapping.rules")

// principalRule is one rule of Kafka's ssl.principal.mapping.rules.
type principalRule struct {
	def     bool // DEFAULT: the distinguished name as it is
	re      *regexp.Regexp
	replace string
	toLower bool
	toUpper bool
}

// principalMapper maps a certificate's subject distinguished name to a
// principal name with Kafka's ssl.principal.mapping.rules: the first rule
// whose pattern matches the whole name gives it; none matching is an error.
type principalMapper []principalRule

// parsePrincipalRules parses Kafka's ssl.principal.mapping.rules: rules
// separated by commas (and spaces), each DEFAULT or
// RULE:pattern/replacement/ with an optional L (lower case) or U (upper
// case) after it; the pattern and replacement cannot contain '/'. The
// replacement refers to the pattern's groups as $1, $2. Empty: DEFAULT.
func parsePrincipalRules(s string) (principalMapper, error) {
	var rules principalMapper
	rest := strings.TrimSpace(s)
	if rest == "" {
		return principalMapper{{def: true}}, nil
	}
	for {
		rest = strings.TrimLeft(rest, " \t\n,")
		if rest == "" {
			return rules, nil
		}
		switch {
		case strings.HasPrefix(rest, "DEFAULT"):
			rules = append(rules, principalRule{def: true})
			rest = rest[len("DEFAULT"):]
		case strings.HasPrefix(rest, "RULE:"):
			body := rest[len("RULE:"):]
			pattern, after, ok := strings.Cut(body, "/")
			if !ok {
				return nil, fmt.Errorf("%w: %q: a RULE needs pattern/replacement/", ErrBadPrincipalRules, s)
			}
			replace, after, ok := strings.Cut(after, "/")
			if !ok {
				return nil, fmt.Errorf("%w: %q: a RULE needs pattern/replacement/", ErrBadPrincipalRules, s)
			}
			re, err := regexp.Compile("^(?:" + pattern + ")$")
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %v", ErrBadPrincipalRules, pattern, err)
			}
			r := principalRule{re: re, replace: replace}
			switch {
			case strings.HasPrefix(after, "L"):
				r.toLower, after = true, after[1:]
			case strings.HasPrefix(after, "U"):
				r.toUpper, after = true, after[1:]
			}
			rules = append(rules, r)
			rest = after
		default:
			return nil, fmt.Errorf("%w: %q: expected DEFAULT or RULE:pattern/replacement/ at %q", ErrBadPrincipalRules, s, rest)
		}
		if rest != "" && !strings.ContainsAny(rest[:1], " \t\n,") {
			return nil, fmt.Errorf("%w: %q: unexpected %q after a rule", ErrBadPrincipalRules, s, rest)
		}
	}
}

// apply maps a distinguished name to a principal name.
func (m principalMapper) apply(dn string) (string, error) {
	for _, r := range m {
		if r.def {
			return dn, nil
		}
		if !r.re.MatchString(dn) {
			continue
		}
		out := r.re.ReplaceAllString(dn, javaReplacement(r.replace))
		switch {
		case r.toLower:
			out = strings.ToLower(out)
		case r.toUpper:
			out = strings.ToUpper(out)
		}
		return out, nil
	}
	return "", fmt.Errorf("no ssl.principal.mapping.rules rule applies to %q", dn)
}

// javaReplacement turns a Java replacement's $1 into Go's ${1}, so that a
// group number followed by letters ("$1x") means what it means in Kafka.
func javaReplacement(s string) string {
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			b.WriteString("${" + s[i+1:j] + "}")
			i = j - 1
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CheckPrincipalMappingRules reports whether rules parse as
// Options.SSLPrincipalMappingRules (ErrBadPrincipalRules if not).
func CheckPrincipalMappingRules(rules string) error {
	_, err := parsePrincipalRules(rules)
	return err
}

// distinguishedName is a certificate's subject as Java's
// X500Principal.getName(RFC2253) writes it - what Kafka's principals,
// super.users and mapping rules are written against: the relative
// distinguished names in reverse order of the certificate's, multi-valued
// ones joined by '+', attribute types by Java's keywords (CN, C, L, ST, O,
// OU, STREET, DC, UID) or else dotted OIDs with the value as '#' and its
// DER in hex, and ,+"\<>; escaped.
func distinguishedName(cert *x509.Certificate) string {
	var rdns pkix.RDNSequence
	if rest, err := asn1.Unmarshal(cert.RawSubject, &rdns); err != nil || len(rest) > 0 {
		return cert.Subject.String() // unparsable: Go's rendering, rather than nothing
	}
	var b strings.Builder
	for i := len(rdns) - 1; i >= 0; i-- {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		for j, atv := range rdns[i] {
			if j > 0 {
				b.WriteByte('+')
			}
			kw, known := javaKeywords[atv.Type.String()]
			s, isString := atv.Value.(string)
			if known && isString {
				b.WriteString(kw)
				b.WriteByte('=')
				b.WriteString(escapeDNValue(s))
				continue
			}
			b.WriteString(atv.Type.String())
			b.WriteString("=#")
			der, _ := asn1.Marshal(atv.Value)
			b.WriteString(hex.EncodeToString(der))
		}
	}
	return b.String()
}

// javaKeywords are the attribute types X500Principal's RFC 2253 form names.
var javaKeywords = map[string]string{
	"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
	"2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}

// escapeDNValue escapes an attribute value as RFC 2253 says.
func escapeDNValue(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case strings.ContainsRune(`,+"\<>;`, r),
			i == 0 && (r == '#' || r == ' '),
			i == len(s)-1 && r == ' ':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
