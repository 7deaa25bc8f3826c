package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// clientSecurity is how spool's --bootstrap-server commands authenticate
// to a secured broker: SASL (the password read from a file or the
// environment, never the command line) and TLS (the CA to trust, and a
// client certificate for mutual TLS).
type clientSecurity struct {
	saslMechanism, saslUser, saslPasswordFile string
	tls                                       bool
	tlsCA, tlsCert, tlsKey                    string
}

// saslPasswordEnv is where the SASL password is read from without
// --sasl-password-file.
const saslPasswordEnv = "SPOOL_SASL_PASSWORD"

// clientSecurityFlags are the names of the flags addClientSecurityFlags
// defines: a command where --bootstrap-server is optional refuses them
// without it, as they only secure its connections.
var clientSecurityFlags = []string{"sasl-mechanism", "sasl-user", "sasl-password-file", "tls", "tls-ca", "tls-cert", "tls-key"}

func addClientSecurityFlags(fs *flag.FlagSet) *clientSecurity {
	cs := &clientSecurity{}
	fs.StringVar(&cs.saslMechanism, "sasl-mechanism", "", "authenticate with SASL `mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with --sasl-user)")
	fs.StringVar(&cs.saslUser, "sasl-user", "", "the SASL `user`")
	fs.StringVar(&cs.saslPasswordFile, "sasl-password-file", "", "read the SASL password from this `file` (its first line); default: the "+saslPasswordEnv+" environment variable")
	fs.BoolVar(&cs.tls, "tls", false, "connect over TLS, trusting the system's CAs (implied by --tls-ca, --tls-cert)")
	fs.StringVar(&cs.tlsCA, "tls-ca", "", "connect over TLS, trusting the CA certificates in this PEM `file`")
	fs.StringVar(&cs.tlsCert, "tls-cert", "", "present this PEM client certificate `file` (mutual TLS; with --tls-key)")
	fs.StringVar(&cs.tlsKey, "tls-key", "", "the PEM private key `file` of --tls-cert")
	return cs
}

// opts turns the flags into client options; an error is a usage error.
func (cs *clientSecurity) opts() ([]kgo.Opt, error) {
	if cs == nil {
		return nil, nil
	}
	var out []kgo.Opt
	if cs.saslMechanism != "" || cs.saslUser != "" {
		if cs.saslMechanism == "" || cs.saslUser == "" {
			return nil, errors.New("--sasl-mechanism and --sasl-user go together")
		}
		pass := os.Getenv(saslPasswordEnv)
		if cs.saslPasswordFile != "" {
			data, err := os.ReadFile(cs.saslPasswordFile)
			if err != nil {
				return nil, fmt.Errorf("--sasl-password-file: %v", err)
			}
			pass, _, _ = strings.Cut(string(data), "\n")
			pass = strings.TrimSuffix(pass, "\r")
		}
		if pass == "" {
			return nil, fmt.Errorf("no SASL password: give --sasl-password-file or set %s", saslPasswordEnv)
		}
		switch strings.ToUpper(cs.saslMechanism) {
		case "PLAIN":
			out = append(out, kgo.SASL(plain.Auth{User: cs.saslUser, Pass: pass}.AsMechanism()))
		case "SCRAM-SHA-256":
			out = append(out, kgo.SASL(scram.Auth{User: cs.saslUser, Pass: pass}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			out = append(out, kgo.SASL(scram.Auth{User: cs.saslUser, Pass: pass}.AsSha512Mechanism()))
		default:
			return nil, fmt.Errorf("--sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", cs.saslMechanism)
		}
	} else if cs.saslPasswordFile != "" {
		return nil, errors.New("--sasl-password-file needs --sasl-mechanism and --sasl-user")
	}
	if cs.tls || cs.tlsCA != "" || cs.tlsCert != "" || cs.tlsKey != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if cs.tlsCA != "" {
			pem, err := os.ReadFile(cs.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %v", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", cs.tlsCA)
			}
		}
		if (cs.tlsCert == "") != (cs.tlsKey == "") {
			return nil, errors.New("--tls-cert and --tls-key go together")
		}
		if cs.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(cs.tlsCert, cs.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert/--tls-key: %v", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		out = append(out, kgo.DialTLSConfig(cfg))
	}
	return out, nil
}
