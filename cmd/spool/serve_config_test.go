package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// writeConfig writes testdata's file (none: "") followed by lines to a
// file of the test's and returns its path.
func writeConfig(t *testing.T, testdata string, lines ...string) string {
	t.Helper()
	var b strings.Builder
	if testdata != "" {
		data, err := os.ReadFile(filepath.Join("testdata", testdata))
		require.NoError(t, err)
		b.Write(data)
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	path := filepath.Join(t.TempDir(), "server.properties")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// describeTopicConfigs asks the broker cl knows for topic's settings.
func describeTopicConfigs(t *testing.T, cl *kgo.Client, topic string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Resources, 1)
	require.Zero(t, resp.Resources[0].ErrorCode)
	out := map[string]string{}
	for _, c := range resp.Resources[0].Configs {
		if c.Value != nil {
			out[c.Name] = *c.Value
		}
	}
	return out
}

// TestServeConfigKRaft starts a node from Kafka's sample KRaft
// server.properties, its ports, directory and two settings overridden by
// lines appended to it (the last of a key's lines wins) and one by a flag
// (flags win): the settings take effect, and the keys spool does not use
// are reported.
func TestServeConfigKRaft(t *testing.T) {
	addrs := freeLoopbackAddrs(t, 1)
	data := filepath.Join(t.TempDir(), "kraft-combined-logs")
	path := writeConfig(t, "kraft-server.properties",
		"controller.quorum.voters=1@"+addrs[0],
		"listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://"+addrs[0],
		"advertised.listeners=",
		"log.dirs="+data,
		"num.partitions=3",
		"log.retention.hours=48",
		"log.segment.bytes=1048576")
	s := startServe(t, "--config", path, "--listeners", "PLAINTEXT://127.0.0.1:0", "--log-segment-bytes", "2097152")

	for _, key := range []string{"num.network.threads", "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
		"num.recovery.threads.per.data.dir", "offsets.topic.replication.factor", "transaction.state.log.replication.factor", "transaction.state.log.min.isr"} {
		require.Regexp(t, `spool serve: .*server.properties:\d+: `+key+` is not used by spool \(ignored\)`, s.log())
	}
	require.NotContains(t, s.log(), "log.dirs is")
	require.NotContains(t, s.log(), "unknown key")

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.AllowAutoTopicCreation(), kgo.UnknownTopicRetries(-1))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("v")}).FirstErr())

	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("auto")
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, mresp.Topics, 1)
	require.Len(t, mresp.Topics[0].Partitions, 3, "num.partitions")

	cfg := describeTopicConfigs(t, cl, "auto")
	require.Equal(t, fmt.Sprint((48 * time.Hour).Milliseconds()), cfg["retention.ms"], "log.retention.hours")
	require.Equal(t, "2097152", cfg["segment.bytes"], "--log-segment-bytes beats log.segment.bytes")

	entries, err := os.ReadDir(data)
	require.NoError(t, err, "log.dirs")
	require.NotEmpty(t, entries)
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
}

// TestServeConfigBadValue: a value spool cannot take names the file, line
// and key, and the node exits with a usage error before creating anything.
func TestServeConfigBadValue(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"# a comment", "log.dirs=" + data, "num.partitions=many"}, "server.properties:3: num.partitions"},
		{[]string{"log.dirs=" + data + ",/elsewhere"}, "server.properties:1: log.dirs"},
		{[]string{"log.dirs=" + data, "auto.create.topics.enable=yes"}, "server.properties:2: auto.create.topics.enable"},
		{[]string{"log.dirs=" + data, "max.connections.per.ip=0"}, "(set by " + "%s:2: max.connections.per.ip)"},
		{[]string{"log.dirs=" + data, `log.retention.ms=\u12`}, "server.properties:2: malformed"},
		{[]string{"log.dirs=" + data, "spool.sasl.plain.users=${file:/nonexistent/pw}"}, "server.properties:2: spool.sasl.plain.users"},
	} {
		path := writeConfig(t, "", tc.lines...)
		code, stderr := serveToExit(t, "--config", path)
		require.Equal(t, exitUsage, code, stderr)
		require.Contains(t, stderr, strings.ReplaceAll(tc.want, "%s", path), tc.lines)
		_, err := os.Stat(data)
		require.ErrorIs(t, err, os.ErrNotExist, "%v created the data directory", tc.lines)
	}
	// --config-strict refuses an unknown key.
	path := writeConfig(t, "", "log.dirs="+data, "num.io.threads=8", "no.such.key=1")
	code, stderr := serveToExit(t, "--config", path, "--config-strict")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "server.properties:3: no.such.key")
	_, err := os.Stat(data)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestServeConfigSecretFromFile: SASL PLAIN passwords come from files,
// through spool's users key and through Kafka's JAAS configuration; both
// users log in, and no password is printed.
func TestServeConfigSecretFromFile(t *testing.T) {
	dir := t.TempDir()
	alicePW, bobPW := "alice-s3cret-pw", "bob-s3cret-pw"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alice"), []byte(alicePW+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bob"), []byte(bobPW), 0o600))
	path := writeConfig(t, "",
		"log.dirs="+filepath.Join(dir, "data"),
		"sasl.enabled.mechanisms=PLAIN",
		"spool.sasl.plain.users=alice:${file:"+filepath.Join(dir, "alice")+"}",
		`listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \`,
		`    username="bob" password="${file:`+filepath.Join(dir, "bob")+`}" \`,
		`    user_bob="${file:`+filepath.Join(dir, "bob")+`}";`)
	s := startServe(t, "--config", path, "--listeners", "SASL_PLAINTEXT://127.0.0.1:0", "--log-level", "debug")
	for user, pw := range map[string]string{"alice": alicePW, "bob": bobPW} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.RequestRetries(0),
			kgo.SASL(plain.Auth{User: user, Pass: pw}.AsMechanism()))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
		cancel()
		cl.Close()
		require.NoError(t, err, user)
	}
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
	require.Contains(t, s.log(), "--sasl-plain=(secret)")
	require.NotContains(t, s.log(), alicePW)
	require.NotContains(t, s.log(), bobPW)
}

// spool.log.max.open.segment.files sets --log-max-open-segment-files, and
// so the broker's bound on open segment files; a value that is not a
// number is refused, naming the line.
func TestServeConfigMaxOpenSegmentFiles(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	d := addBrokerDefaultFlags(fs)
	_, err := applyConfigFile(fs, writeConfig(t, "", "spool.log.max.open.segment.files=100"), true, io.Discard)
	require.NoError(t, err)
	var o spool.Options
	require.NoError(t, d.apply(&o))
	require.Equal(t, 100, o.MaxOpenSegmentFiles)

	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	addBrokerDefaultFlags(fs)
	_, err = applyConfigFile(fs, writeConfig(t, "", "spool.log.max.open.segment.files=many"), true, io.Discard)
	require.ErrorIs(t, err, errConfig)
	require.ErrorContains(t, err, "server.properties:1: spool.log.max.open.segment.files")
}
