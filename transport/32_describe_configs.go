package transport

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeConfigs v0-4: a topic's settings under Kafka's names, each with
// its value and where it comes from - DYNAMIC_TOPIC_CONFIG when the topic
// sets it (CreateTopics, AlterConfigs, IncrementalAlterConfigs), else
// STATIC_BROKER_CONFIG when the broker's Options.Topic does, else
// DEFAULT_CONFIG - and the broker's own settings (read-only: spool's
// options are fixed when it starts). v1 adds sources and synonyms, v3
// config types and documentation.
func init() { register(kmsg.DescribeConfigs, 0, 4, describeConfigs) }

// topicKey is one topic setting as Kafka names it. spool keeps a topic's
// settings in a spool.TopicConfig whose zero fields mean "the broker's
// default", so a Kafka value of 0 that differs from the default
// (retention.ms, retention.bytes, delete.retention.ms, min.compaction.lag.ms
// over a non-zero default, min.cleanable.dirty.ratio) is kept as the
// nearest value spool can hold: 1 ms, 1 byte, a ratio of 1e-6. Three Kafka
// settings spool has one value of (min.insync.replicas 1,
// message.timestamp.type CreateTime, unclean.leader.election.enable false)
// are listed and accept only that value.
type topicKey struct {
	name   string // the topic setting
	broker string // its broker-wide default, a synonym
	typ    kmsg.ConfigType
	doc    string
	// get formats the setting of c (a zero field: its default, as the
	// topic gets it); isSet reports whether c sets it.
	get   func(c spool.TopicConfig) string
	isSet func(c spool.TopicConfig) bool
	// set parses v into c; def holds the topic's defaults.
	set func(c *spool.TopicConfig, v string, def spool.TopicConfig) error
	// clear makes c take the default.
	clear func(c *spool.TopicConfig)
	// alterList, for a list, adds (IncrementalAlterConfigs APPEND) or
	// removes (SUBTRACT) the elements of v.
	alterList func(c *spool.TopicConfig, v string, def spool.TopicConfig, add bool) error
}

// apiError is a request (or part of one) refused with a Kafka error code
// and message, for the admin APIs' per-resource errors.
type apiError struct {
	code int16
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func invalidConfig(format string, args ...any) error {
	return &apiError{errInvalidConfig, fmt.Sprintf(format, args...)}
}

func invalidValue(name, v, why string) error {
	return invalidConfig("Invalid value %s for configuration %s: %s", v, name, why)
}

const kafkaLongMax = "9223372036854775807"

// maxMs is the most milliseconds a time.Duration holds; larger values
// (Kafka's Long.MAX_VALUE, "forever") are clamped to it and shown as
// Long.MAX_VALUE.
const maxMs = math.MaxInt64 / int64(time.Millisecond)

func msString(d time.Duration) string {
	switch {
	case d < 0:
		return "-1"
	case d >= time.Duration(maxMs)*time.Millisecond:
		return kafkaLongMax
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

func parseLong(name, v string, least int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, invalidValue(name, v, "Not a number of type LONG")
	}
	if n < least {
		return 0, invalidValue(name, v, fmt.Sprintf("Value must be at least %d", least))
	}
	return n, nil
}

func parseInt(name, v string, least int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil {
		return 0, invalidValue(name, v, "Not a number of type INT")
	}
	if n < least {
		return 0, invalidValue(name, v, fmt.Sprintf("Value must be at least %d", least))
	}
	return n, nil
}

// msDuration converts milliseconds to a duration, clamping; 0 becomes def
// when def is 0 (nothing to distinguish), else 1 ms.
func msDuration(ms int64, def time.Duration) time.Duration {
	switch {
	case ms == 0 && def != 0:
		return time.Millisecond
	case ms > maxMs:
		ms = maxMs
	}
	return time.Duration(ms) * time.Millisecond
}

// durationKey is a setting in milliseconds.
func durationKey(name, broker, doc string, least int64, field func(*spool.TopicConfig) *time.Duration, zeroIsUnlimited bool) topicKey {
	return topicKey{
		name: name, broker: broker, typ: kmsg.ConfigTypeLong, doc: doc,
		get: func(c spool.TopicConfig) string {
			d := *field(&c)
			if d == 0 && zeroIsUnlimited {
				return kafkaLongMax
			}
			return msString(d)
		},
		isSet: func(c spool.TopicConfig) bool { return *field(&c) != 0 },
		set: func(c *spool.TopicConfig, v string, def spool.TopicConfig) error {
			ms, err := parseLong(name, v, least)
			if err != nil {
				return err
			}
			*field(c) = msDuration(ms, *field(&def))
			return nil
		},
		clear: func(c *spool.TopicConfig) { *field(c) = 0 },
	}
}

// fixedKey is a Kafka topic setting spool has one value of; it accepts
// only that value.
func fixedKey(name, broker string, typ kmsg.ConfigType, value, doc string) topicKey {
	return topicKey{
		name: name, broker: broker, typ: typ, doc: doc + " spool supports only " + value + ".",
		get:   func(spool.TopicConfig) string { return value },
		isSet: func(spool.TopicConfig) bool { return false },
		set: func(_ *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			if !strings.EqualFold(strings.TrimSpace(v), value) {
				return invalidValue(name, v, "spool supports only "+value)
			}
			return nil
		},
		clear: func(*spool.TopicConfig) {},
	}
}

// minDirtyRatio stands for min.cleanable.dirty.ratio=0, which spool would
// read as "the default".
const minDirtyRatio = 1e-6

var topicKeys = []topicKey{
	{
		name: "cleanup.policy", broker: "log.cleanup.policy", typ: kmsg.ConfigTypeList, alterList: alterPolicy,
		doc:   "What happens to old log segments: delete them by time and size, compact them (keep the latest record per key), or both.",
		get:   func(c spool.TopicConfig) string { return string(normPolicy(c.CleanupPolicy)) },
		isSet: func(c spool.TopicConfig) bool { return c.CleanupPolicy != "" },
		set: func(c *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			p, err := parsePolicy(v)
			if err == nil {
				c.CleanupPolicy = p
			}
			return err
		},
		clear: func(c *spool.TopicConfig) { c.CleanupPolicy = "" },
	},
	{
		name: "compression.type", broker: "compression.type", typ: kmsg.ConfigTypeString,
		doc: "The codec of batches this process's producers write: gzip, snappy, lz4, zstd, or producer (keep the producer's). " +
			"spool stores batches produced over the network as they come; uncompressed is the same as producer.",
		get: func(c spool.TopicConfig) string {
			if c.Compression == record.None {
				return "producer"
			}
			return c.Compression.String()
		},
		isSet: func(c spool.TopicConfig) bool { return c.Compression != record.None },
		set: func(c *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			switch v = strings.TrimSpace(v); v {
			case "producer", "uncompressed":
				c.Compression = record.None
			case "gzip", "snappy", "lz4", "zstd":
				c.Compression, _ = record.ParseCodec(v)
			default:
				return invalidValue("compression.type", v, "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer")
			}
			return nil
		},
		clear: func(c *spool.TopicConfig) { c.Compression = record.None },
	},
	durationKey("delete.retention.ms", "log.cleaner.delete.retention.ms",
		"How long a tombstone outlives its timestamp in a compacted topic.", 0,
		func(c *spool.TopicConfig) *time.Duration { return &c.DeleteRetention }, false),
	durationKey("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
		"The longest a record stays uncompacted.", 1,
		func(c *spool.TopicConfig) *time.Duration { return &c.MaxCompactionLag }, true),
	{
		name: "max.message.bytes", broker: "message.max.bytes", typ: kmsg.ConfigTypeInt,
		doc:   "The largest record batch the topic accepts, after compression.",
		get:   func(c spool.TopicConfig) string { return strconv.Itoa(c.MaxMessageBytes) },
		isSet: func(c spool.TopicConfig) bool { return c.MaxMessageBytes != 0 },
		set: func(c *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			n, err := parseInt("max.message.bytes", v, record.HeaderSize)
			if err == nil {
				c.MaxMessageBytes = int(n)
			}
			return err
		},
		clear: func(c *spool.TopicConfig) { c.MaxMessageBytes = 0 },
	},
	fixedKey("message.timestamp.type", "log.message.timestamp.type", kmsg.ConfigTypeString, "CreateTime",
		"Whether records keep the producer's timestamp (CreateTime) or get the broker's (LogAppendTime)."),
	{
		name: "min.cleanable.dirty.ratio", broker: "log.cleaner.min.cleanable.ratio", typ: kmsg.ConfigTypeDouble,
		doc:   "The share of a compacted log not yet cleaned above which it is cleaned.",
		get:   func(c spool.TopicConfig) string { return strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64) },
		isSet: func(c spool.TopicConfig) bool { return c.MinCleanableDirtyRatio != 0 },
		set: func(c *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || math.IsNaN(f) {
				return invalidValue("min.cleanable.dirty.ratio", v, "Not a number of type DOUBLE")
			}
			if f < 0 || f > 1 {
				return invalidValue("min.cleanable.dirty.ratio", v, "Value must be between 0 and 1")
			}
			c.MinCleanableDirtyRatio = max(f, minDirtyRatio)
			return nil
		},
		clear: func(c *spool.TopicConfig) { c.MinCleanableDirtyRatio = 0 },
	},
	durationKey("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms",
		"The least time a record stays uncompacted.", 0,
		func(c *spool.TopicConfig) *time.Duration { return &c.MinCompactionLag }, false),
	{
		name: "min.insync.replicas", broker: "min.insync.replicas", typ: kmsg.ConfigTypeInt,
		doc: "The in-sync replicas that must have a record before an acks=all produce succeeds; with fewer in sync, " +
			"such produce is refused. A standalone broker has one replica per partition: only 1 is allowed there.",
		get:   func(c spool.TopicConfig) string { return strconv.Itoa(max(c.MinInSyncReplicas, 1)) },
		isSet: func(c spool.TopicConfig) bool { return c.MinInSyncReplicas != 0 },
		set: func(c *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			n, err := parseInt("min.insync.replicas", v, 1)
			if err == nil {
				c.MinInSyncReplicas = int(n)
			}
			return err
		},
		clear: func(c *spool.TopicConfig) { c.MinInSyncReplicas = 0 },
	},
	{
		name: "retention.bytes", broker: "log.retention.bytes", typ: kmsg.ConfigTypeLong,
		doc: "The size a partition's log is trimmed to by deleting old segments; -1: unlimited.",
		get: func(c spool.TopicConfig) string {
			if c.RetentionBytes < 0 {
				return "-1"
			}
			return strconv.FormatInt(c.RetentionBytes, 10)
		},
		isSet: func(c spool.TopicConfig) bool { return c.RetentionBytes != 0 },
		set: func(c *spool.TopicConfig, v string, def spool.TopicConfig) error {
			n, err := parseLong("retention.bytes", v, math.MinInt64)
			if err != nil {
				return err
			}
			if n == 0 && def.RetentionBytes != 0 {
				n = 1 // 0 would read as "the default"
			}
			c.RetentionBytes = n
			return nil
		},
		clear: func(c *spool.TopicConfig) { c.RetentionBytes = 0 },
	},
	durationKey("retention.ms", "log.retention.ms",
		"How long a segment is kept after its newest record; -1: forever.", -1,
		func(c *spool.TopicConfig) *time.Duration { return &c.RetentionTime }, false),
	{
		name: "segment.bytes", broker: "log.segment.bytes", typ: kmsg.ConfigTypeInt,
		doc:   "The size at which a partition's active segment rolls.",
		get:   func(c spool.TopicConfig) string { return strconv.FormatInt(c.SegmentBytes, 10) },
		isSet: func(c spool.TopicConfig) bool { return c.SegmentBytes != 0 },
		set: func(c *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			n, err := parseInt("segment.bytes", v, record.HeaderSize)
			if err == nil {
				c.SegmentBytes = n
			}
			return err
		},
		clear: func(c *spool.TopicConfig) { c.SegmentBytes = 0 },
	},
	durationKey("segment.ms", "log.roll.ms",
		"The age at which a partition's active segment rolls.", 1,
		func(c *spool.TopicConfig) *time.Duration { return &c.SegmentAge }, false),
	{
		name: "unclean.leader.election.enable", broker: "unclean.leader.election.enable", typ: kmsg.ConfigTypeBoolean,
		doc:   "Whether a replica out of sync may become leader when no in-sync replica is left, losing the records only the old ISR held.",
		get:   func(c spool.TopicConfig) string { return strconv.FormatBool(c.UncleanLeaderElection) },
		isSet: func(c spool.TopicConfig) bool { return c.UncleanLeaderElection },
		set: func(c *spool.TopicConfig, v string, _ spool.TopicConfig) error {
			b, err := strconv.ParseBool(strings.ToLower(strings.TrimSpace(v)))
			if err != nil || strings.TrimSpace(v) == "1" || strings.TrimSpace(v) == "0" {
				return invalidValue("unclean.leader.election.enable", v, "Expected value to be either true or false")
			}
			c.UncleanLeaderElection = b
			return nil
		},
		clear: func(c *spool.TopicConfig) { c.UncleanLeaderElection = false },
	},
}

func topicKeyNamed(name string) (topicKey, bool) {
	for _, k := range topicKeys {
		if k.name == name {
			return k, true
		}
	}
	return topicKey{}, false
}

// normPolicy spells a cleanup policy as Kafka lists it.
func normPolicy(p spool.CleanupPolicy) spool.CleanupPolicy {
	if p == "delete,compact" {
		return spool.CleanupCompactDelete
	}
	return p
}

func parsePolicy(v string) (spool.CleanupPolicy, error) {
	del, compact, err := policyElements(v)
	if err != nil {
		return "", err
	}
	return policyOf(del, compact, v)
}

// policyElements reports which of delete and compact a cleanup.policy
// list holds.
func policyElements(v string) (del, compact bool, err error) {
	for _, p := range strings.Split(v, ",") {
		switch strings.TrimSpace(p) {
		case "delete":
			del = true
		case "compact":
			compact = true
		default:
			return false, false, invalidValue("cleanup.policy", v, "String must be a comma-separated list of: compact, delete")
		}
	}
	return del, compact, nil
}

func policyOf(del, compact bool, v string) (spool.CleanupPolicy, error) {
	switch {
	case del && compact:
		return spool.CleanupCompactDelete, nil
	case compact:
		return spool.CleanupCompact, nil
	case del:
		return spool.CleanupDelete, nil
	}
	return "", invalidValue("cleanup.policy", v, "spool needs delete, compact or both")
}

// configEntry is a setting as a request names it.
type configEntry struct {
	name  string
	value *string
}

// topicConfigFrom builds a topic's own settings from Kafka settings: those
// given replace the defaults. A null value leaves the default.
func topicConfigFrom(entries []configEntry, def spool.TopicConfig) (spool.TopicConfig, error) {
	var c spool.TopicConfig
	for _, e := range entries {
		k, ok := topicKeyNamed(e.name)
		if !ok {
			return c, invalidConfig("Unknown topic config name: %s", e.name)
		}
		if e.value == nil {
			k.clear(&c)
			continue
		}
		if err := k.set(&c, *e.value, def); err != nil {
			return c, err
		}
	}
	return c, nil
}

// configView is one setting as DescribeConfigs and CreateTopics show it.
type configView struct {
	name, value string
	source      kmsg.ConfigSource
	readOnly    bool
	typ         kmsg.ConfigType
	doc         string
	synonyms    []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
}

func synonym(name, value string, source kmsg.ConfigSource) kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	s.Name, s.Value, s.Source = name, &value, source
	return s
}

// topicViews shows a topic's settings: own are the topic's, defaults what
// it gets where it sets nothing, brokerSet the broker's Options.Topic (its
// fields set: STATIC_BROKER_CONFIG rather than DEFAULT_CONFIG).
func topicViews(own, defaults, brokerSet spool.TopicConfig) []configView {
	views := make([]configView, 0, len(topicKeys))
	for _, k := range topicKeys {
		brokerSource := kmsg.ConfigSourceDefaultConfig
		if k.isSet(brokerSet) {
			brokerSource = kmsg.ConfigSourceStaticBrokerConfig
		}
		v := configView{name: k.name, typ: k.typ, doc: k.doc, value: k.get(defaults), source: brokerSource}
		if k.isSet(own) {
			v.value, v.source = k.get(own), kmsg.ConfigSourceDynamicTopicConfig
			v.synonyms = append(v.synonyms, synonym(k.name, v.value, v.source))
		}
		v.synonyms = append(v.synonyms, synonym(k.broker, k.get(defaults), brokerSource))
		views = append(views, v)
	}
	return views
}

// brokerViews shows the broker's settings, all read-only: spool takes them
// from its Options when it starts. A setting at spool's default is
// DEFAULT_CONFIG, another STATIC_BROKER_CONFIG.
func (s *Server) brokerViews() []configView {
	o := s.b.Options()
	defaults := s.b.TopicDefaults()
	var views []configView
	add := func(name string, typ kmsg.ConfigType, value string, isDefault bool, doc string) {
		src := kmsg.ConfigSourceStaticBrokerConfig
		if isDefault {
			src = kmsg.ConfigSourceDefaultConfig
		}
		views = append(views, configView{name: name, value: value, source: src, readOnly: true, typ: typ, doc: doc,
			synonyms: []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{synonym(name, value, src)}})
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	host, port := s.advertised()
	node := s.opts.NodeID
	add("node.id", kmsg.ConfigTypeInt, itoa(int64(node)), node == DefaultNodeID, "The broker's id.")
	add("broker.id", kmsg.ConfigTypeInt, itoa(int64(node)), node == DefaultNodeID, "The broker's id.")
	protocol := "PLAINTEXT"
	if s.opts.SASL != nil {
		protocol = "SASL_PLAINTEXT"
	}
	add("advertised.listeners", kmsg.ConfigTypeString, fmt.Sprintf("%s://%s:%d", protocol, host, port), false,
		"The address clients are told to connect to.")
	add("sasl.enabled.mechanisms", kmsg.ConfigTypeList, strings.Join(s.saslMechanisms(), ","), s.opts.SASL == nil,
		"The SASL mechanisms clients may authenticate with.")
	add("socket.request.max.bytes", kmsg.ConfigTypeInt, strconv.Itoa(s.opts.MaxRequestBytes),
		s.opts.MaxRequestBytes == DefaultMaxRequestBytes, "The largest request the broker reads.")
	add("sasl.server.max.receive.size", kmsg.ConfigTypeInt, strconv.Itoa(s.opts.MaxPreAuthBytes),
		s.opts.MaxPreAuthBytes == DefaultMaxPreAuthBytes, "The largest request read before SASL authentication.")
	add("connections.max.idle.ms", kmsg.ConfigTypeLong, ms(s.opts.IdleTimeout),
		s.opts.IdleTimeout == DefaultIdleTimeout, "How long an idle connection stays open.")
	add("num.partitions", kmsg.ConfigTypeInt, itoa(int64(o.DefaultPartitions)), o.DefaultPartitions == 1,
		"The partitions of a topic created without a count.")
	add("auto.create.topics.enable", kmsg.ConfigTypeBoolean, strconv.FormatBool(s.b.AutoCreateTopics()),
		o.AutoCreateTopics == spool.Default, "Whether a topic is created when first used.")
	add("default.replication.factor", kmsg.ConfigTypeInt, "1", true, "The replicas of a new topic: one, on this node.")
	add("offsets.topic.num.partitions", kmsg.ConfigTypeInt, itoa(int64(o.OffsetsTopicPartitions)),
		o.OffsetsTopicPartitions == spool.DefaultOffsetsTopicPartitions, "The partitions of __consumer_offsets.")
	retention := "-1"
	if o.OffsetsRetention >= 0 {
		retention = itoa(int64(o.OffsetsRetention / time.Minute))
	}
	add("offsets.retention.minutes", kmsg.ConfigTypeInt, retention, o.OffsetsRetention == group.DefaultOffsetsRetention,
		"How long a group's committed offsets outlive its last member.")
	minSession, maxSession := o.GroupMinSessionTimeout, o.GroupMaxSessionTimeout
	if minSession == 0 {
		minSession = group.DefaultMinSessionTimeout
	}
	if maxSession == 0 {
		maxSession = group.DefaultMaxSessionTimeout
	}
	add("group.min.session.timeout.ms", kmsg.ConfigTypeInt, ms(minSession), minSession == group.DefaultMinSessionTimeout,
		"The shortest session timeout a group member may ask for.")
	add("group.max.session.timeout.ms", kmsg.ConfigTypeInt, ms(maxSession), maxSession == group.DefaultMaxSessionTimeout,
		"The longest session timeout a group member may ask for.")
	add("group.initial.rebalance.delay.ms", kmsg.ConfigTypeInt, ms(o.GroupInitialRebalanceDelay), o.GroupInitialRebalanceDelay == 0,
		"How long a new group waits for more members before its first generation.")
	add("log.retention.check.interval.ms", kmsg.ConfigTypeLong, ms(o.RetentionCheckInterval),
		o.RetentionCheckInterval == log.DefaultRetentionCheck, "How often retention runs.")
	add("log.cleaner.backoff.ms", kmsg.ConfigTypeLong, ms(o.CleanerBackoff), o.CleanerBackoff == 15*time.Second,
		"How often compacted topics are checked for cleaning.")
	dedupe := o.CleanerBufferBytes
	if dedupe == 0 {
		dedupe = log.DefaultCleanerBufferBytes
	}
	add("log.cleaner.dedupe.buffer.size", kmsg.ConfigTypeLong, strconv.Itoa(dedupe), o.CleanerBufferBytes == 0,
		"The memory of one clean's key map.")
	flushMessages, flushMs := "1", kafkaLongMax // sync: every append
	switch f := o.Flush.String(); {
	case f == "none":
		flushMessages = kafkaLongMax
	case strings.HasPrefix(f, "interval:"):
		flushMessages = kafkaLongMax
		if d, err := time.ParseDuration(strings.TrimPrefix(f, "interval:")); err == nil {
			flushMs = ms(d)
		}
	}
	add("log.flush.interval.messages", kmsg.ConfigTypeLong, flushMessages, false, "Appends between fsyncs (1: spool's sync policy).")
	add("log.flush.interval.ms", kmsg.ConfigTypeLong, flushMs, false, "Time between fsyncs (spool's interval policy).")
	for _, k := range topicKeys {
		add(k.broker, k.typ, k.get(defaults), !k.isSet(o.Topic), "The default of the topic setting "+k.name+".")
	}
	slices.SortFunc(views, func(a, b configView) int { return strings.Compare(a.name, b.name) })
	return slices.CompactFunc(views, func(a, b configView) bool { return a.name == b.name })
}

func describeConfigs(c *conn, req *request, body *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, r := range body.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		views, err := c.describeResource(r.ResourceType, r.ResourceName)
		if !c.canConfigs(acl.OpDescribeConfigs, r.ResourceType, r.ResourceName) {
			views, err = nil, configsDenied(r.ResourceType)
		}
		if err != nil {
			rr.ErrorCode = apiErrorCode(err)
			msg := err.Error()
			rr.ErrorMessage = &msg
			resp.Resources = append(resp.Resources, rr)
			continue
		}
		rr.Configs = []kmsg.DescribeConfigsResponseResourceConfig{}
		for _, v := range views {
			if len(r.ConfigNames) > 0 && !slices.Contains(r.ConfigNames, v.name) {
				continue
			}
			e := kmsg.NewDescribeConfigsResponseResourceConfig()
			value := v.value
			e.Name, e.Value, e.ReadOnly, e.Source, e.ConfigType = v.name, &value, v.readOnly, v.source, v.typ
			e.IsDefault = v.source == kmsg.ConfigSourceDefaultConfig
			if body.IncludeSynonyms {
				e.ConfigSynonyms = v.synonyms
			}
			if body.IncludeDocumentation {
				doc := v.doc
				e.Documentation = &doc
			}
			rr.Configs = append(rr.Configs, e)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// describeResource shows a topic's or this broker's settings.
func (c *conn) describeResource(typ kmsg.ConfigResourceType, name string) ([]configView, error) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		if err := spool.ValidTopicName(name); err != nil {
			return nil, err
		}
		own, _, err := c.s.b.TopicSettings(name)
		if err != nil {
			return nil, err
		}
		return topicViews(own, c.s.b.TopicDefaults(), c.s.b.Options().Topic), nil
	case kmsg.ConfigResourceTypeBroker:
		if err := c.s.checkBrokerResource(name); err != nil {
			return nil, err
		}
		if name == "" {
			return nil, nil // the cluster-wide dynamic defaults: none
		}
		return c.s.brokerViews(), nil
	case kmsg.ConfigResourceTypeGroupConfig:
		if name == "" {
			return nil, &apiError{errInvalidRequest, "Group name must not be empty"}
		}
		return c.groupConfigViews(name), nil
	}
	return nil, &apiError{errInvalidRequest, fmt.Sprintf("Unsupported resource type %v", typ)}
}

// checkBrokerResource accepts this node's id or "" (the cluster default),
// as Kafka does.
func (s *Server) checkBrokerResource(name string) error {
	if name != "" && name != strconv.Itoa(int(s.opts.NodeID)) {
		return &apiError{errInvalidRequest, fmt.Sprintf("Unexpected broker id, expected %d or empty string, but received %s", s.opts.NodeID, name)}
	}
	return nil
}

// apiErrorCode is the Kafka error code of an error from the admin APIs.
func apiErrorCode(err error) int16 {
	var ce *apiError
	if errors.As(err, &ce) {
		return ce.code
	}
	var re *remoteError
	if errors.As(err, &re) {
		return re.code
	}
	return errorCode(err)
}
