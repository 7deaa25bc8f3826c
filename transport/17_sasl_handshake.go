package transport

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslHandshake v0-1. Version 0 is advertised because librdkafka's feature
// detection requires it (it then uses v1); after a v0 handshake the client's
// SASL tokens come as bare size-prefixed frames, not SaslAuthenticate
// requests, and the handler reads and answers them itself (saslRawTokens).
func init() { registerRaw(kmsg.SASLHandshake, 0, 1, saslHandshake) }

// Kafka's answers (SaslServerAuthenticator, KafkaApis):
//   - no SASL on the listener, or the connection already authenticated:
//     ILLEGAL_SASL_STATE; the connection stays (re-authentication, KIP-368,
//     is not supported: SaslAuthenticate reports a session lifetime of 0);
//   - a second handshake before authentication: ILLEGAL_SASL_STATE, close;
//   - a mechanism not enabled: UNSUPPORTED_SASL_MECHANISM with the enabled
//     list, close;
//   - otherwise the enabled list (kafkajs checks its mechanism is in it).
func saslHandshake(c *conn, req *request) (responseWriter, error) {
	body := req.body.(*kmsg.SASLHandshakeRequest)
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SetVersion(req.version)
	resp.SupportedMechanisms = c.s.saslMechanisms()
	switch {
	case !c.ln.SASL || c.authenticated:
		resp.ErrorCode = errIllegalSASLState
	case c.saslMech != "":
		resp.ErrorCode = errIllegalSASLState
		c.closeAfter = true
	case !slices.Contains(resp.SupportedMechanisms, body.Mechanism):
		resp.ErrorCode = errUnsupportedSASLMechanism
		c.closeAfter = true
	default:
		c.saslMech = body.Mechanism
		if req.version == 0 {
			c.saslV0 = true
			if err := c.writeResponse(req, encoded(resp)); err != nil {
				return nil, err
			}
			return nil, c.saslRawTokens()
		}
	}
	return encoded(resp), nil
}

// saslRawTokens runs the exchange that follows a v0 handshake: each client
// token is a frame of int32 size and bytes, each server token likewise (an
// empty one when the mechanism has nothing to say, as Kafka sends for
// PLAIN). A failure closes the connection without an answer, as Kafka does:
// there is no error field to carry it.
func (c *conn) saslRawTokens() error {
	// The handshake's frame is done with (kmsg copied the mechanism's
	// name): each token takes its own room in the request memory.
	c.releaseFrame()
	for !c.authenticated {
		token, err := c.readRawToken()
		if err != nil {
			return err
		}
		reply, done, err := c.saslStep(token)
		c.releaseFrame()
		if err != nil {
			return fmt.Errorf("%s (SaslHandshake v0): %w", c.saslMech, err)
		}
		if err := c.writeRawToken(reply); err != nil {
			return err
		}
		if done {
			c.authenticated, c.scram = true, nil
		}
	}
	return nil
}

// readRawToken reads one size-prefixed client token, at most
// MaxPreAuthBytes, through the request memory as a request frame is.
func (c *conn) readRawToken() ([]byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(c.s.opts.IdleTimeout))
	var sz [4]byte
	if _, err := io.ReadFull(c.r, sz[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(sz[:]))
	if size < 0 || int(size) > c.s.opts.MaxPreAuthBytes {
		return nil, fmt.Errorf("transport: SASL token of %d bytes (limit %d)", size, c.s.opts.MaxPreAuthBytes)
	}
	return c.readBody(int(size))
}

func (c *conn) writeRawToken(token []byte) error {
	defer c.releaseOut()
	c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.IdleTimeout))
	w := c.out()
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(token)))); err != nil {
		return err
	}
	if _, err := w.Write(token); err != nil {
		return err
	}
	return w.Flush()
}
