package transport

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslAuthenticate v0-2 carries the SASL tokens after a v1 handshake (see
// sasl.go). v1 adds SessionLifetimeMs, always 0 here: no re-authentication
// (KIP-368) is asked for.
func init() { register(kmsg.SASLAuthenticate, 0, 2, saslAuthenticate) }

func saslAuthenticate(c *conn, req *request, body *kmsg.SASLAuthenticateRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SASLAuthBytes = []byte{}
	fail := func(code int16, msg string) (kmsg.Response, error) {
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		return resp, nil
	}
	switch {
	case !c.ln.SASL:
		// As Kafka on a listener without SASL (KafkaApis).
		return fail(errIllegalSASLState, "SASL is not enabled on this listener")
	case c.authenticated:
		return fail(errIllegalSASLState, "SaslAuthenticate request received after successful authentication")
	case c.saslMech == "":
		c.closeAfter = true
		return fail(errIllegalSASLState, "SaslAuthenticate request received before SaslHandshake")
	}
	reply, done, err := c.saslStep(body.SASLAuthBytes)
	if err != nil {
		if !errors.Is(err, errSASLFailed) {
			return nil, err
		}
		c.s.logger.Debug("SASL authentication failed", "remote", c.remote, "mechanism", c.saslMech, "err", err)
		c.closeAfter = true
		return fail(errSASLAuthenticationFailed, saslFailureMessage(c.saslMech))
	}
	resp.SASLAuthBytes = reply
	if done {
		c.authenticated, c.scram = true, nil
	}
	return resp, nil
}
