package transport

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
)

// Listener is one listener's settings, as Kafka's listeners,
// advertised.listeners and listener.security.protocol.map give them: a
// broker may take plaintext clients on one port and SASL over TLS on
// another, each told its own address. Server.Serve serves one listener
// with the server-wide Options (TLS, SASL, the advertised address);
// Server.ServeListener serves one with its own.
type Listener struct {
	// Name names it in logs and in DescribeConfigs' listeners, e.g.
	// "PLAINTEXT", "SASL_SSL", "INTERNAL". Default: its security
	// protocol's name.
	Name string
	// TLS, when set, makes its connections TLS (SSL, or SASL_SSL with
	// SASL).
	TLS *tls.Config
	// SASL requires its clients to authenticate with the users of
	// Options.SASL (SASL_PLAINTEXT, or SASL_SSL with TLS).
	SASL bool
	// AdvertisedHost and AdvertisedPort are what Metadata tells the
	// clients of this listener (advertised.listeners). Default: the
	// listener's own address.
	AdvertisedHost string
	AdvertisedPort int32
}

// SecurityProtocol is Kafka's name for the listener's security: PLAINTEXT,
// SSL, SASL_PLAINTEXT or SASL_SSL.
func (l Listener) SecurityProtocol() string {
	switch {
	case l.TLS != nil && l.SASL:
		return "SASL_SSL"
	case l.TLS != nil:
		return "SSL"
	case l.SASL:
		return "SASL_PLAINTEXT"
	}
	return "PLAINTEXT"
}

// listener is a Listener being served, with the address it listens on.
type listener struct {
	Listener
	addr net.Addr
}

// defaultListener is the listener Serve serves: the server-wide options.
func (s *Server) defaultListener(l net.Listener) *listener {
	ln := &listener{Listener: Listener{TLS: s.opts.TLS, SASL: s.opts.SASL != nil,
		AdvertisedHost: s.opts.AdvertisedHost, AdvertisedPort: s.opts.AdvertisedPort}, addr: l.Addr()}
	ln.Name = ln.SecurityProtocol()
	return ln
}

// ServeListener is Serve with a listener's own security and advertised
// address. SASL needs Options.SASL's users.
func (s *Server) ServeListener(l net.Listener, cfg Listener) error {
	if cfg.SASL && s.opts.SASL == nil {
		l.Close()
		return fmt.Errorf("%w: listener %q requires SASL, but Options.SASL has no users", ErrInvalidOptions, cfg.Name)
	}
	if cfg.AdvertisedPort < 0 {
		l.Close()
		return fmt.Errorf("%w: listener %q: AdvertisedPort %d", ErrInvalidOptions, cfg.Name, cfg.AdvertisedPort)
	}
	ln := &listener{Listener: cfg, addr: l.Addr()}
	if ln.Name == "" {
		ln.Name = ln.SecurityProtocol()
	}
	return s.serve(l, false, ln)
}

// advertised is the host and port a listener's clients are told to use.
func (ln *listener) advertised() (string, int32) {
	host, port := ln.AdvertisedHost, ln.AdvertisedPort
	if ln.addr != nil {
		if h, p, err := net.SplitHostPort(ln.addr.String()); err == nil {
			if host == "" {
				host = h
				if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
					host = "localhost"
				}
			}
			if port == 0 {
				n, _ := strconv.Atoi(p)
				port = int32(n)
			}
		}
	}
	if host == "" {
		host = "localhost"
	}
	return host, port
}
