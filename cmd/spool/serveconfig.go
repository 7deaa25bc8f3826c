package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is spool serve --config: a Kafka broker's server.properties
// turned into serve's flags. Each key spool supports names the flag it
// sets (configKeys); the file's values are set on the flags the command
// line did not set, so that flags win and each setting is checked in one
// place, whichever way it came.

// errConfig is a server.properties value spool cannot use, or (with
// --config-strict) a key it does not know.
var errConfig = errors.New("bad configuration")

// configError is a problem with one line of the config file. It never
// holds a secret value.
type configError struct {
	File string
	Line int
	Key  string
	Err  error
}

func (e *configError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %v", e.File, e.Line, e.Key, e.Err)
}

func (e *configError) Unwrap() error { return e.Err }

// notUsed is what a converter returns for a value spool accepts but does
// nothing with (or cannot honour): the key is reported on stderr, and not
// set.
type notUsed string

func (n notUsed) Error() string { return string(n) }

// configKey maps a Kafka broker setting onto serve's flags.
type configKey struct {
	key string
	// flags are the flags set to the converted value ("" converted: none);
	// none when the key is only read by another key's conversion.
	flags []string
	// unless are further flags that, set on the command line, make the
	// file's key moot (--listen against listeners).
	unless []string
	// conv turns the file's value into the flags' spelling; nil: as is.
	conv func(c *configFile, v string) (string, error)
	// secret: the value is never printed.
	secret bool
}

// configKeys are the Kafka settings spool serve takes, in the order they
// are applied: of keys that set the same flag, the later wins, as
// log.retention.ms wins over .minutes and .hours in Kafka.
var configKeys = []configKey{
	{key: "node.id", flags: []string{"node-id"}, conv: intValue},
	{key: "broker.id", flags: []string{"node-id"}, conv: intValue},
	{key: "process.roles", conv: processRoles},
	{key: "controller.quorum.voters", flags: []string{"controller-quorum-voters"}},
	{key: "controller.listener.names", flags: []string{"controller-listen"}, conv: controllerListen},
	{key: "listeners", flags: []string{"listeners"}, unless: []string{"listen", "advertised-addr"}, conv: withoutControllerListeners},
	{key: "advertised.listeners", flags: []string{"advertised-listeners"}, unless: []string{"listen", "advertised-addr", "listeners"}, conv: withoutControllerListeners},
	{key: "listener.security.protocol.map", flags: []string{"listener-security-protocol-map"}, unless: []string{"listen", "advertised-addr", "listeners"}, conv: withoutControllerListeners},
	{key: "inter.broker.listener.name", flags: []string{"inter-broker-listener-name"}, unless: []string{"listen", "listeners"}, conv: clusterOnly},
	{key: "broker.session.timeout.ms", flags: []string{"session-timeout"}, conv: chain(msValue, clusterOnly)},
	{key: "log.dir", flags: []string{"data"}, conv: logDirs},
	{key: "log.dirs", flags: []string{"data"}, conv: logDirs},
	{key: "num.partitions", flags: []string{"num-partitions"}, conv: intValue},
	{key: "default.replication.factor", flags: []string{"default-replication-factor"}, conv: intValue},
	{key: "min.insync.replicas", flags: []string{"min-insync-replicas"}, conv: intValue},
	{key: "unclean.leader.election.enable", flags: []string{"unclean-leader-election"}, conv: boolValue},
	{key: "auto.create.topics.enable", flags: []string{"auto-create-topics"}, conv: boolValue},
	{key: "delete.topic.enable", conv: onlyValue("true", "spool always lets an authorized client delete topics")},
	{key: "log.retention.hours", flags: []string{"log-retention"}, conv: retention(time.Hour)},
	{key: "log.retention.minutes", flags: []string{"log-retention"}, conv: retention(time.Minute)},
	{key: "log.retention.ms", flags: []string{"log-retention"}, conv: retention(time.Millisecond)},
	{key: "log.retention.bytes", flags: []string{"log-retention-bytes"}, conv: retentionBytes},
	{key: "log.segment.bytes", flags: []string{"log-segment-bytes"}, conv: intValue},
	{key: "log.roll.hours", flags: []string{"log-roll"}, conv: unitValue(time.Hour)},
	{key: "log.roll.ms", flags: []string{"log-roll"}, conv: msValue},
	{key: "log.retention.check.interval.ms", flags: []string{"log-retention-check-interval"}, conv: msValue},
	{key: "spool.log.max.open.segment.files", flags: []string{"log-max-open-segment-files"}, conv: intValue},
	{key: "log.cleanup.policy", flags: []string{"log-cleanup-policy"}, conv: func(_ *configFile, v string) (string, error) {
		return strings.ReplaceAll(strings.ToLower(v), " ", ""), nil
	}},
	{key: "log.flush.interval.messages", flags: []string{"flush"}, conv: flushMessages},
	{key: "log.flush.interval.ms", flags: []string{"flush"}, conv: flushInterval},
	{key: "message.max.bytes", flags: []string{"message-max-bytes"}, conv: intValue},
	{key: "compression.type", conv: onlyValue("producer", "spool stores batches produced over the network as they come (producer)", "uncompressed")},
	{key: "offsets.retention.minutes", flags: []string{"offsets-retention"}, conv: unitValue(time.Minute)},
	{key: "offsets.topic.num.partitions", flags: []string{"offsets-topic-partitions"}, conv: intValue},
	{key: "transaction.state.log.num.partitions", flags: []string{"transaction-state-partitions"}, conv: intValue},
	{key: "transaction.max.timeout.ms", flags: []string{"transaction-max-timeout"}, conv: msValue},
	{key: "group.initial.rebalance.delay.ms", flags: []string{"group-initial-rebalance-delay"}, conv: msValue},
	{key: "group.min.session.timeout.ms", flags: []string{"group-min-session-timeout"}, conv: msValue},
	{key: "group.max.session.timeout.ms", flags: []string{"group-max-session-timeout"}, conv: msValue},
	{key: "group.consumer.heartbeat.interval.ms", flags: []string{"group-consumer-heartbeat-interval"}, conv: msValue},
	{key: "group.consumer.session.timeout.ms", flags: []string{"group-consumer-session-timeout"}, conv: msValue},
	{key: "group.share.record.lock.duration.ms", flags: []string{"share-lock-duration"}, conv: msValue},
	{key: "group.share.delivery.count.limit", flags: []string{"share-delivery-limit"}, conv: intValue},
	{key: "socket.request.max.bytes", flags: []string{"socket-request-max-bytes"}, conv: intValue},
	{key: "queued.max.request.bytes", flags: []string{"queued-max-request-bytes"}, conv: intValue},
	{key: "connections.max.idle.ms", flags: []string{"connections-max-idle"}, conv: msValue},
	{key: "max.connections", flags: []string{"max-connections"}, conv: intValue},
	{key: "max.connections.per.ip", flags: []string{"max-connections-per-ip"}, conv: intValue},
	{key: "max.incremental.fetch.session.cache.slots", flags: []string{"fetch-session-cache-slots"}, conv: intValue},
	{key: "sasl.enabled.mechanisms", conv: saslMechanisms},
	{key: "spool.sasl.plain.users", flags: []string{"sasl-plain"}, secret: true},
	{key: "spool.sasl.scram.sha.256.users", flags: []string{"sasl-scram-sha-256"}, secret: true},
	{key: "spool.sasl.scram.sha.512.users", flags: []string{"sasl-scram-sha-512"}, secret: true},
	{key: "ssl.keystore.type", conv: storeType},
	{key: "ssl.keystore.location", flags: []string{"tls-cert", "tls-key"}, conv: pemStore("ssl.keystore.type")},
	{key: "ssl.certificate.location", flags: []string{"tls-cert"}},
	{key: "ssl.key.location", flags: []string{"tls-key"}},
	{key: "ssl.truststore.type", conv: storeType},
	{key: "ssl.truststore.location", flags: []string{"tls-client-ca"}, conv: chain(pemStore("ssl.truststore.type"), clientAuthRequired)},
	{key: "ssl.client.auth", conv: onlyValue("none", "spool asks TLS clients for a certificate exactly when ssl.truststore.location (--tls-client-ca) is given, and then requires one", "required")},
	{key: "ssl.principal.mapping.rules", flags: []string{"ssl-principal-mapping-rules"}},
	{key: "authorizer.class.name", flags: []string{"authorizer"}, conv: func(_ *configFile, v string) (string, error) {
		return strconv.FormatBool(v != ""), nil
	}},
	{key: "super.users", flags: []string{"super-users"}},
	{key: "allow.everyone.if.no.acl.found", conv: onlyValue("false", "with the authorizer on, spool denies what no ACL allows")},
}

// ignoredKeys are Kafka settings spool has no use for: they are reported,
// not refused, so that a Kafka broker's file starts spool.
var ignoredKeys = []string{
	"num.network.threads", "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
	"background.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "socket.listen.backlog.size",
	"offsets.topic.replication.factor", "offsets.topic.segment.bytes", "transaction.state.log.replication.factor",
	"transaction.state.log.min.isr", "transaction.state.log.segment.bytes", "share.coordinator.state.topic.replication.factor",
	"share.coordinator.state.topic.min.isr", "log.index.size.max.bytes", "log.index.interval.bytes", "log.preallocate",
	"log.message.format.version", "inter.broker.protocol.version", "metadata.log.dir", "auto.leader.rebalance.enable",
	"group.coordinator.rebalance.protocols", "group.share.enable", "share.version", "unstable.api.versions.enable",
	"ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
	"ssl.secure.random.implementation", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
	"ssl.truststore.password", "sasl.mechanism.inter.broker.protocol", "security.inter.broker.protocol",
	"delegation.token.master.key", "delegation.token.secret.key", "reserved.broker.max.id", "broker.rack",
	"metric.reporters", "metrics.num.samples", "metrics.sample.window.ms", "metrics.recording.level",
	"controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms", "controller.quorum.election.backoff.max.ms",
	"controller.quorum.append.linger.ms", "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms",
	"broker.heartbeat.interval.ms", "initial.broker.registration.timeout.ms",
}

// ignoredPrefixes are families of settings spool has no use for.
var ignoredPrefixes = []string{
	"zookeeper.", "log.cleaner.", "replica.", "controlled.shutdown.", "leader.imbalance.", "metadata.log.",
	"metadata.max.", "quota.", "client.quota.", "remote.log.", "kafka.metrics.", "confluent.", "log.local.",
}

// unsupportedKeys are settings spool does not take, and why: they are
// reported like the ignored ones, with the reason.
var unsupportedKeys = map[string]string{
	"controller.quorum.bootstrap.servers": "spool needs the voters with their ids: set controller.quorum.voters",
	"ssl.keystore.password":               "spool takes unencrypted PEM keys only",
	"ssl.key.password":                    "spool takes unencrypted PEM keys only",
	"ssl.keystore.key":                    "spool takes PEM files: set ssl.keystore.type=PEM and ssl.keystore.location (or --tls-cert and --tls-key)",
	"ssl.keystore.certificate.chain":      "spool takes PEM files: set ssl.keystore.type=PEM and ssl.keystore.location (or --tls-cert and --tls-key)",
	"ssl.truststore.certificates":         "spool takes PEM files: set ssl.truststore.type=PEM and ssl.truststore.location (or --tls-client-ca)",
}

// jaasUserOption is a PlainLoginModule user: user_NAME="PASSWORD".
var jaasUserOption = regexp.MustCompile(`\buser_([^\s="]+)\s*=\s*"([^"]*)"`)

// configFile is a server.properties being applied to serve's flags.
type configFile struct {
	path  string
	props map[string]property
	fs    *flag.FlagSet
	// cmdline are the flags set on the command line.
	cmdline map[string]bool
	// report notes a key left out, and why.
	report func(key, why string)
	// origin maps each flag the file set to the line that set it, for
	// later messages about the flag.
	origin map[string]string
}

// value is key's trimmed value, with ${file:PATH} references replaced by
// the files' contents; ok is false when the file does not set key.
func (c *configFile) value(key string) (v string, ok bool, err error) {
	p, ok := c.props[key]
	if !ok {
		return "", false, nil
	}
	v, err = expandFileRefs(strings.TrimSpace(p.Value))
	return v, true, err
}

// flagValue is a flag's value as the command line or the file has set it
// so far.
func (c *configFile) flagValue(name string) string { return c.fs.Lookup(name).Value.String() }

// expandFileRefs replaces each ${file:PATH} in v with the content of the
// file at PATH, its trailing newline trimmed: a secret can live in a file
// of its own (Kafka's FileConfigProvider, simplified).
func expandFileRefs(v string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(v, "${file:")
		if i < 0 {
			b.WriteString(v)
			return b.String(), nil
		}
		j := strings.IndexByte(v[i:], '}')
		if j < 0 {
			return "", errors.New("${file: without its closing }")
		}
		path := v[i+len("${file:") : i+j]
		data, err := os.ReadFile(path)
		if err != nil {
			return "", err // names the path, not the content
		}
		b.WriteString(v[:i])
		b.WriteString(strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r"))
		v = v[i+j+1:]
	}
}

// isSecret reports whether key's value must never be printed.
func isSecret(key string) bool {
	if i := slices.IndexFunc(configKeys, func(k configKey) bool { return k.key == key }); i >= 0 && configKeys[i].secret {
		return true
	}
	return strings.Contains(key, "password") || strings.Contains(key, "jaas") || strings.Contains(key, "secret") ||
		strings.HasSuffix(key, ".key")
}

// applyConfigFile reads the server.properties at path and sets its values
// on the flags of fs that the command line did not set. It reports, a line
// each on warn, the keys it ignores; with strict an unknown key is an
// error. It returns the flags it set, each mapped to "FILE:LINE: KEY" for
// messages about them.
func applyConfigFile(fs *flag.FlagSet, path string, strict bool, warn io.Writer) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	props, err := readProperties(f)
	if pe := (*propertiesError)(nil); errors.As(err, &pe) {
		return nil, fmt.Errorf("%s:%d: %w", path, pe.Line, pe.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c := &configFile{path: path, props: props, fs: fs, cmdline: map[string]bool{}, origin: map[string]string{}}
	fs.Visit(func(fl *flag.Flag) { c.cmdline[fl.Name] = true })
	errAt := func(key string, err error) error {
		return &configError{File: path, Line: props[key].Line, Key: key, Err: err}
	}
	// The keys left out are reported in the file's order.
	type note struct {
		line int
		msg  string
	}
	var notes []note
	report := func(key, why string) {
		notes = append(notes, note{props[key].Line, fmt.Sprintf("spool serve: %s:%d: %s%s\n", path, props[key].Line, key, why)})
	}
	defer func() {
		slices.SortStableFunc(notes, func(a, b note) int { return a.line - b.line })
		for _, n := range notes {
			io.WriteString(warn, n.msg)
		}
	}()
	c.report = report
	known := map[string]bool{}
	for _, k := range configKeys {
		known[k.key] = true
		v, ok, err := c.value(k.key)
		if !ok {
			continue
		}
		if err != nil {
			return nil, errAt(k.key, err)
		}
		if slices.ContainsFunc(append(slices.Clone(k.flags), k.unless...), func(f string) bool { return c.cmdline[f] }) {
			continue // the command line wins
		}
		if k.conv != nil {
			if v, err = k.conv(c, v); err != nil {
				var n notUsed
				if errors.As(err, &n) {
					report(k.key, string(n)+" (ignored)")
					continue
				}
				return nil, errAt(k.key, err)
			}
		}
		if v == "" {
			continue
		}
		for _, name := range k.flags {
			if err := fs.Set(name, v); err != nil {
				if k.secret {
					err = errors.New("invalid value")
				}
				return nil, errAt(k.key, fmt.Errorf("%w (--%s)", err, name))
			}
			c.origin[name] = fmt.Sprintf("%s:%d: %s", path, props[k.key].Line, k.key)
		}
	}
	// SASL PLAIN users from a JAAS configuration, as Kafka keeps them.
	for _, key := range keysByLine(props) {
		if known[key] {
			continue
		}
		switch {
		case strings.HasSuffix(key, "sasl.jaas.config"):
			if err := c.jaasUsers(key); err != nil {
				return nil, errAt(key, err)
			}
		case slices.Contains(ignoredKeys, key) || slices.ContainsFunc(ignoredPrefixes, func(p string) bool { return strings.HasPrefix(key, p) }):
			report(key, " is not used by spool (ignored)")
		case unsupportedKeys[key] != "":
			report(key, " is not supported: "+unsupportedKeys[key]+" (ignored)")
		case strict:
			return nil, errAt(key, fmt.Errorf("%w: unknown key (--config-strict)", errConfig))
		default:
			report(key, " is an unknown key (ignored)")
		}
	}
	return c.origin, nil
}

// jaasUsers takes the users of a PlainLoginModule JAAS configuration
// (listener.name.NAME.plain.sasl.jaas.config, or sasl.jaas.config) as
// --sasl-plain users; other login modules are reported.
func (c *configFile) jaasUsers(key string) error {
	v, _, err := c.value(key)
	if err != nil {
		return err
	}
	if c.cmdline["sasl-plain"] {
		return nil
	}
	if !strings.Contains(v, "PlainLoginModule") {
		c.report(key, " is not used by spool: only PlainLoginModule users are taken; SCRAM users come from --sasl-scram-* or AlterUserScramCredentials (ignored)")
		return nil
	}
	for _, m := range jaasUserOption.FindAllStringSubmatch(v, -1) {
		pass, err := expandFileRefs(m[2])
		if err != nil {
			return err
		}
		if strings.Contains(pass, ",") || strings.Contains(m[1], ":") {
			return fmt.Errorf("%w: user %s: spool's user names may not contain a colon, nor passwords a comma", errConfig, m[1])
		}
		if err := c.fs.Set("sasl-plain", m[1]+":"+pass); err != nil {
			return fmt.Errorf("%w: user %s: invalid", errConfig, m[1])
		}
		c.origin["sasl-plain"] = fmt.Sprintf("%s:%d: %s", c.path, c.props[key].Line, key)
	}
	return nil
}

func keysByLine(props map[string]property) []string {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return props[a].Line - props[b].Line })
	return keys
}

// chain applies convs in turn.
func chain(convs ...func(*configFile, string) (string, error)) func(*configFile, string) (string, error) {
	return func(c *configFile, v string) (string, error) {
		var err error
		for _, conv := range convs {
			if v, err = conv(c, v); err != nil {
				return "", err
			}
		}
		return v, nil
	}
}

func intValue(_ *configFile, v string) (string, error) {
	if _, err := strconv.ParseInt(v, 10, 64); err != nil {
		return "", fmt.Errorf("%w: %q is not an integer", errConfig, v)
	}
	return v, nil
}

// boolValue takes true or false, in any case, as Kafka does.
func boolValue(_ *configFile, v string) (string, error) {
	switch strings.ToLower(v) {
	case "true":
		return "true", nil
	case "false":
		return "false", nil
	}
	return "", fmt.Errorf("%w: %q: want true or false", errConfig, v)
}

// unitValue converts a count of unit to a duration; -1 (Kafka's "no
// limit") stays negative.
func unitValue(unit time.Duration) func(*configFile, string) (string, error) {
	return func(_ *configFile, v string) (string, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", fmt.Errorf("%w: %q is not an integer", errConfig, v)
		}
		if n > int64(1<<63-1)/int64(unit) {
			n = int64(1<<63-1) / int64(unit) // Long.MAX_VALUE: as good as forever
		}
		return (time.Duration(n) * unit).String(), nil
	}
}

var msValue = unitValue(time.Millisecond)

// retention converts log.retention.*: -1 keeps everything, and 0 (delete
// at once), which spool's 0 (the default) cannot say, is the nearest
// spool can hold, 1 ms.
func retention(unit time.Duration) func(*configFile, string) (string, error) {
	return func(c *configFile, v string) (string, error) {
		if strings.TrimSpace(v) == "0" {
			return time.Millisecond.String(), nil
		}
		return unitValue(unit)(c, v)
	}
}

func retentionBytes(c *configFile, v string) (string, error) {
	if v == "0" {
		return "1", nil
	}
	return intValue(c, v)
}

// flushMessages: 1 is spool's sync; spool cannot count, so a larger
// count leaves the writing back to the OS, as Kafka's default
// (Long.MAX_VALUE) does, unless log.flush.interval.ms sets an interval.
func flushMessages(c *configFile, v string) (string, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return "", fmt.Errorf("%w: %q is not a positive integer", errConfig, v)
	}
	if n == 1 {
		return "sync", nil
	}
	return "none", nil
}

// flushInterval sets --flush interval:D, unless log.flush.interval.messages
// is 1 (sync, which is stronger).
func flushInterval(c *configFile, v string) (string, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return "", fmt.Errorf("%w: %q is not a positive integer", errConfig, v)
	}
	if m, ok, _ := c.value("log.flush.interval.messages"); ok && m == "1" {
		return "", nil
	}
	if n > int64(1<<63-1)/int64(time.Millisecond) {
		return "none", nil // Kafka's default, Long.MAX_VALUE: never
	}
	return "interval:" + (time.Duration(n) * time.Millisecond).String(), nil
}

// logDirs takes the one directory spool keeps its data in.
func logDirs(_ *configFile, v string) (string, error) {
	dirs := slices.DeleteFunc(strings.Split(v, ","), func(s string) bool { return strings.TrimSpace(s) == "" })
	if len(dirs) > 1 {
		return "", fmt.Errorf("%w: %d directories: spool keeps its data in one", errConfig, len(dirs))
	}
	if len(dirs) == 0 {
		return "", fmt.Errorf("%w: no directory", errConfig)
	}
	return strings.TrimSpace(dirs[0]), nil
}

// onlyValue accepts the values spool behaves as (the first is spool's),
// and reports any other with why.
func onlyValue(values ...string) func(*configFile, string) (string, error) {
	spools, why, others := values[0], values[1], values[2:]
	return func(_ *configFile, v string) (string, error) {
		if strings.EqualFold(v, spools) || slices.ContainsFunc(others, func(o string) bool { return strings.EqualFold(v, o) }) {
			return "", nil
		}
		return "", notUsed(fmt.Sprintf("=%s is not supported: %s", v, why))
	}
}

// clusterOnly: the setting is a cluster node's; on a standalone broker
// (no controller.quorum.voters) it is reported and left out.
func clusterOnly(c *configFile, v string) (string, error) {
	if c.flagValue("controller-quorum-voters") == "" {
		return "", notUsed(" is not used by spool: it matters on a cluster node only (controller.quorum.voters)")
	}
	return v, nil
}

// controllerNames are the listener names controller.listener.names gives.
func (c *configFile) controllerNames() []string {
	v, _, _ := c.value("controller.listener.names")
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.ToUpper(strings.TrimSpace(n)); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// withoutControllerListeners drops the controller's listeners from a list
// of NAME://host:port or NAME:PROTOCOL: spool's controller listener is
// --controller-listen, its Kafka listeners --listeners.
func withoutControllerListeners(c *configFile, v string) (string, error) {
	ctrl := c.controllerNames()
	var kept []string
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		name, _, _ := strings.Cut(item, ":")
		if item == "" || slices.Contains(ctrl, strings.ToUpper(name)) {
			continue
		}
		kept = append(kept, item)
	}
	return strings.Join(kept, ","), nil
}

// controllerListen takes the address of the first listener
// controller.listener.names names as --controller-listen, on a cluster
// node.
func controllerListen(c *configFile, v string) (string, error) {
	ls, _, err := c.value("listeners")
	if err != nil {
		return "", err
	}
	ctrl := c.controllerNames()
	for _, item := range strings.Split(ls, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(item), "://")
		if ok && slices.Contains(ctrl, strings.ToUpper(name)) {
			if c.flagValue("controller-quorum-voters") == "" {
				return "", notUsed(" is not used by spool: its listeners matter on a cluster node only (controller.quorum.voters)")
			}
			return addr, nil
		}
	}
	return "", nil // a broker only: its controllers are the voters
}

// processRoles: a spool node listed in controller.quorum.voters is
// controller and broker, any other a broker.
func processRoles(c *configFile, v string) (string, error) {
	roles := strings.Split(strings.ReplaceAll(strings.ToLower(v), " ", ""), ",")
	slices.Sort(roles)
	switch strings.Join(roles, ",") {
	case "broker", "broker,controller":
		return "", nil
	case "controller":
		return "", notUsed("=controller is not supported: a spool node is always a broker too")
	}
	return "", fmt.Errorf("%w: %q: want broker, controller or both", errConfig, v)
}

// saslMechanisms checks the mechanisms are spool's; spool enables those
// it is given users for (--sasl-*).
func saslMechanisms(_ *configFile, v string) (string, error) {
	for _, m := range strings.Split(v, ",") {
		switch strings.ToUpper(strings.TrimSpace(m)) {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "":
		default:
			return "", notUsed(fmt.Sprintf(" mechanism %s is not supported: spool has PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, each enabled by its users (--sasl-*)", strings.TrimSpace(m)))
		}
	}
	return "", nil
}

// storeType: spool's key stores are PEM files.
func storeType(_ *configFile, v string) (string, error) {
	if !strings.EqualFold(v, "PEM") {
		return "", notUsed(fmt.Sprintf("=%s is not supported: spool reads PEM files only", v))
	}
	return "", nil
}

// pemStore takes a key or trust store's location when its type (typeKey)
// is PEM; Kafka's default type, JKS, is reported.
func pemStore(typeKey string) func(*configFile, string) (string, error) {
	return func(c *configFile, v string) (string, error) {
		if t, _, _ := c.value(typeKey); !strings.EqualFold(t, "PEM") {
			return "", notUsed(fmt.Sprintf(" is not supported: spool reads PEM files only, and %s is %s (JKS unless set)", typeKey, cmp.Or(t, "not set")))
		}
		return v, nil
	}
}

// clientAuthRequired: the trust store is spool's --tls-client-ca, which
// requires client certificates, so it is taken when ssl.client.auth
// requires them.
func clientAuthRequired(c *configFile, v string) (string, error) {
	if a, _, _ := c.value("ssl.client.auth"); !strings.EqualFold(a, "required") {
		return "", notUsed(" is not used by spool: spool verifies client certificates only with ssl.client.auth=required")
	}
	return v, nil
}
