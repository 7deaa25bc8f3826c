package interop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xdgscram "github.com/xdg-go/scram"
)

// The users of the SASL server, one per mechanism.
var saslArgs = []string{
	"--sasl-plain", "plain-user:plain-pw,other:other-pw",
	"--sasl-scram-sha-256", "scram256:pw-256",
	"--sasl-scram-sha-512", "scram512:pw-512",
}

// saslCase is one mechanism with its user; wrong has a bad password.
type saslCase struct {
	name, user, pass string
}

var saslCases = []saslCase{
	{"PLAIN", "plain-user", "plain-pw"},
	{"SCRAM-SHA-256", "scram256", "pw-256"},
	{"SCRAM-SHA-512", "scram512", "pw-512"},
}

func kgoMechanism(c saslCase) sasl.Mechanism {
	switch c.name {
	case "PLAIN":
		return plain.Auth{User: c.user, Pass: c.pass}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: c.user, Pass: c.pass}.AsSha256Mechanism()
	default:
		return scram.Auth{User: c.user, Pass: c.pass}.AsSha512Mechanism()
	}
}

// TestFranzGoSASL: with each mechanism, create a topic, produce and
// consume; a wrong password, a user of another mechanism and no SASL at
// all are refused.
func TestFranzGoSASL(t *testing.T) {
	s := startServer(t, saslArgs...)
	ctx := testContext(t, 60*time.Second)
	for _, c := range saslCases {
		t.Run(c.name, func(t *testing.T) {
			cl := kgoClient(t, s, kgo.SASL(kgoMechanism(c)))
			adm := kadm.NewClient(cl)
			topic := "kgo-sasl-" + strings.ToLower(c.name)
			kadmCreate(t, ctx, adm, topic, 2, nil)
			led := newLedger()
			kgoProduce(t, ctx, cl, led, topic, c.name, 100)
			consumer := kgoClient(t, s, kgo.SASL(kgoMechanism(c)), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			kgoConsumeAll(t, ctx, consumer, led, 100, "kgo")
			led.checkExactlyOnce(t)
		})
	}
	refused := func(t *testing.T, opts ...kgo.Opt) error {
		cl := kgoClient(t, s, append(opts, kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))...)
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := kadm.NewClient(cl).ListTopics(short)
		require.Error(t, err)
		return err
	}
	t.Run("wrong password", func(t *testing.T) {
		for _, c := range saslCases {
			c.pass += "x"
			err := refused(t, kgo.SASL(kgoMechanism(c)))
			require.ErrorIs(t, err, kerr.SaslAuthenticationFailed, "%s", c.name)
		}
	})
	t.Run("user of another mechanism", func(t *testing.T) {
		err := refused(t, kgo.SASL(kgoMechanism(saslCase{"SCRAM-SHA-256", "plain-user", "plain-pw"})))
		require.ErrorIs(t, err, kerr.SaslAuthenticationFailed)
	})
	t.Run("no SASL", func(t *testing.T) {
		refused(t)
	})
}

// xdgSCRAM is sarama's SCRAMClient on github.com/xdg-go/scram, as sarama's
// examples do it.
type xdgSCRAM struct {
	hash xdgscram.HashGeneratorFcn
	conv *xdgscram.ClientConversation
}

func (x *xdgSCRAM) Begin(user, pass, authzID string) error {
	c, err := x.hash.NewClient(user, pass, authzID)
	if err != nil {
		return err
	}
	x.conv = c.NewConversation()
	return nil
}

func (x *xdgSCRAM) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *xdgSCRAM) Done() bool                            { return x.conv.Done() }

func saramaSASLConfig(c saslCase) *sarama.Config {
	cfg := saramaConfig("sarama-sasl")
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.User, cfg.Net.SASL.Password = c.user, c.pass
	cfg.Net.SASL.Mechanism = sarama.SASLMechanism(c.name)
	switch c.name {
	case "SCRAM-SHA-256":
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{hash: xdgscram.SHA256} }
	case "SCRAM-SHA-512":
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{hash: xdgscram.SHA512} }
	}
	return cfg
}

// TestSaramaSASL: with each mechanism sarama (SaslHandshake v1,
// SaslAuthenticate v2) creates a topic, produces and consumes; a wrong
// password is refused.
func TestSaramaSASL(t *testing.T) {
	s := startServer(t, saslArgs...)
	ctx := testContext(t, 60*time.Second)
	for _, c := range saslCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := saramaSASLConfig(c)
			topic := "sarama-sasl-" + strings.ToLower(c.name)
			saramaCreate(t, s, cfg, topic, 2)
			led := newLedger()
			saramaSyncProduce(t, s, cfg, led, saramaMessages(topic, c.name, 100))
			saramaConsumePartitions(t, ctx, s, cfg, led, topic, 100)
			led.checkExactlyOnce(t)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		for _, c := range saslCases {
			c.pass += "x"
			cfg := saramaSASLConfig(c)
			cfg.Metadata.Retry.Max = 0
			_, err := sarama.NewClient([]string{s.Addr}, cfg)
			require.Error(t, err, c.name)
			// sarama reports "kafka: client has run out of available
			// brokers"; the broker's error is in the joined errors.
			require.True(t, errors.Is(err, sarama.ErrSASLAuthenticationFailed) || strings.Contains(err.Error(), "SASL"),
				"%s: %v", c.name, err)
		}
	})
}
