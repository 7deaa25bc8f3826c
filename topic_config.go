package spool

import (
	"context"
	"errors"
	"fmt"
)

// Reading and changing topics' settings after they are created: what the
// Kafka protocol's DescribeConfigs, AlterConfigs and IncrementalAlterConfigs
// need.

// AutoCreateTopics reports whether a topic is created the first time it is
// used (Options.AutoCreateTopics, auto.create.topics.enable).
func (b *Broker) AutoCreateTopics() bool { return b.opts.AutoCreateTopics.on(true) }

// Options returns the broker's options, every default filled in except the
// per-topic ones in Options.Topic (zero there: the library's default).
func (b *Broker) Options() Options { return b.opts }

// TopicDefaults returns the settings of a topic that sets none itself: the
// broker's (Options.Topic), then the library's defaults; Partitions is
// Options.DefaultPartitions.
func (b *Broker) TopicDefaults() TopicConfig { return b.effective(TopicConfig{}) }

// TopicSettings returns a topic's own settings - the fields it sets itself,
// zero where it takes the broker's default, Partitions zero - and its
// effective settings, every default filled in and Partitions its partition
// count.
func (b *Broker) TopicSettings(name string) (own, effective TopicConfig, err error) {
	return b.route(name).settings(name)
}

func (s soloStore) settings(name string) (own, effective TopicConfig, err error) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return own, effective, ErrClosed
	}
	t := b.snapshot()[name]
	if t == nil {
		return own, effective, fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	own = t.config()
	effective = b.effective(own)
	effective.Partitions = int32(len(t.partitions()))
	return own, effective, nil
}

// CheckTopicConfig reports whether a topic's own settings are acceptable:
// each field in range, and the log settings they make, with the broker's
// defaults filled in, ones a partition's log opens with.
func (b *Broker) CheckTopicConfig(cfg TopicConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := b.logOptions(b.effective(cfg)).Check(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return nil
}

// AlterTopicConfig changes a topic's own settings: alter gets them (zero
// fields: the broker's defaults) and returns the new ones, which replace
// them whole; Partitions is ignored (see CreatePartitions). The new settings
// are checked (CheckTopicConfig), recorded in the registry on stable storage,
// and applied to the topic's partitions: segment size and age, retention,
// and the compaction settings at once; cleanup.policy, max.message.bytes
// and compression.type when the broker next opens the topic.
//
// alter runs with the broker's topic lock held, so concurrent changes to one
// topic apply one after the other; it must not call the Broker.
func (b *Broker) AlterTopicConfig(ctx context.Context, name string, alter func(own TopicConfig) (TopicConfig, error)) error {
	return b.route(name).alterTopicConfig(ctx, name, alter)
}

func (s soloStore) alterTopicConfig(ctx context.Context, name string, alter func(own TopicConfig) (TopicConfig, error)) error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	old := b.snapshot()
	t := old[name]
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	cfg, err := alter(t.config())
	if err != nil {
		return err
	}
	cfg.Partitions = 0 // the registry records the count separately
	if err := b.CheckTopicConfig(cfg); err != nil {
		return err
	}
	if m := b.effective(cfg).MinInSyncReplicas; m > 1 {
		return fmt.Errorf("%w: MinInSyncReplicas %d: a standalone broker has one replica per partition", ErrInvalidConfig, m)
	}
	if t.internal && !b.effective(cfg).CleanupPolicy.compacts() {
		return fmt.Errorf("%w: %q must stay compacted", ErrInvalidConfig, name)
	}
	reg := b.registryLocked(old)
	for i := range reg.Topics {
		if reg.Topics[i].Name == name {
			reg.Topics[i].Config = toStored(cfg)
		}
	}
	if err := writeRegistryFS(b.fs, b.dir, reg); err != nil {
		return err
	}
	// Readers (DescribeTopic, the cleaner, producers) load the config
	// atomically, without mu.
	t.setConfig(cfg)
	b.topics.Store(new(cloneMap(old)))
	lo := b.logOptions(b.effective(cfg))
	var errs []error
	for _, p := range t.online() { // an offline one gets cfg when it opens
		errs = append(errs, p.Log().Reconfigure(lo))
	}
	return errors.Join(errs...)
}
