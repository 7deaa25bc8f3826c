package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/spoolmq/spool/replica"
)

// Image is the cluster's metadata as of one entry of the metadata log:
// brokers, topics and their partitions' states, the producer-id counter and
// the cluster id (KRaft's MetadataImage). An Image is immutable; applying
// an entry makes a new one that shares what did not change. Every node
// holds the image of the committed log it has applied.
type Image struct {
	index          uint64
	clusterID      string
	brokers        map[int32]*BrokerInfo
	topics         map[string]*TopicInfo
	byID           map[string]string // topic id -> name
	nextProducerID int64
	settings       map[SettingsKind]Settings
}

// Settings is one settings document: its data and how many changes made
// it (0: never set).
type Settings struct {
	Version int64           `json:"version"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Recent are the ids of the last changes (oldest first, up to
	// recentSettingsChanges).
	Recent []string `json:"recent,omitempty"`
}

// recentSettingsChanges is how many change ids a settings document
// remembers.
const recentSettingsChanges = 32

// BrokerInfo is one registered broker incarnation.
type BrokerInfo struct {
	ID            int32
	IncarnationID string
	// Epoch is the index of the metadata entry that registered this
	// incarnation: unique and increasing per registration (KIP-903).
	Epoch      int64
	Kafka      Endpoint
	Controller string
	Rack       string
	// Listeners are the broker's named Kafka listeners; none: one
	// unnamed listener, Kafka, told to every client.
	Listeners            []NamedEndpoint `json:",omitempty"`
	Fenced               bool
	InControlledShutdown bool
}

// Endpoint is the broker's endpoint on the Kafka listener named name: its
// one listener's if it registered no names; false if it has no listener
// of that name.
func (b *BrokerInfo) Endpoint(name string) (Endpoint, bool) {
	if len(b.Listeners) == 0 {
		return b.Kafka, true
	}
	for _, l := range b.Listeners {
		if l.Name == name {
			return Endpoint{Host: l.Host, Port: l.Port}, true
		}
	}
	return Endpoint{}, false
}

// Eligible reports whether the broker may lead or join an ISR: unfenced
// and not shutting down.
func (b *BrokerInfo) Eligible() bool { return b != nil && !b.Fenced && !b.InControlledShutdown }

// TopicInfo is one topic and its partitions' states.
type TopicInfo struct {
	Name string
	ID   string
	// Config is the topic's own settings in the broker's encoding;
	// ConfigVersion counts its changes.
	Config        json.RawMessage
	ConfigVersion int64
	Unclean       bool
	MinISR        int
	Partitions    []replica.PartitionState
}

// NewImage returns the image of an empty metadata log.
func NewImage() *Image {
	return &Image{brokers: map[int32]*BrokerInfo{}, topics: map[string]*TopicInfo{}, byID: map[string]string{}, nextProducerID: 0}
}

// Index is the index of the last entry applied (0: none).
func (im *Image) Index() uint64 { return im.index }

// ClusterID is the cluster's id ("" until the first controller names it).
func (im *Image) ClusterID() string { return im.clusterID }

// NextProducerID is where the next block of producer ids starts.
func (im *Image) NextProducerID() int64 { return im.nextProducerID }

// Broker returns the registration of broker id.
func (im *Image) Broker(id int32) (BrokerInfo, bool) {
	b := im.brokers[id]
	if b == nil {
		return BrokerInfo{}, false
	}
	return *b, true
}

// Settings returns the settings document of kind k (version 0 and no data
// if it was never set). The data is shared: do not modify it.
func (im *Image) Settings(k SettingsKind) Settings { return im.settings[k] }

// Brokers lists every registered broker, by id.
func (im *Image) Brokers() []BrokerInfo {
	out := make([]BrokerInfo, 0, len(im.brokers))
	for _, b := range im.brokers {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Eligible reports whether broker id may lead or join an ISR.
func (im *Image) Eligible(id int32) bool { return im.brokers[id].Eligible() }

// Topic returns a topic by name. The TopicInfo is shared: do not modify it.
func (im *Image) Topic(name string) (*TopicInfo, bool) {
	t := im.topics[name]
	return t, t != nil
}

// TopicByID returns a topic by id.
func (im *Image) TopicByID(id string) (*TopicInfo, bool) {
	name, ok := im.byID[id]
	if !ok {
		return nil, false
	}
	return im.Topic(name)
}

// Topics lists the topic names, sorted.
func (im *Image) Topics() []string {
	names := slices.Collect(maps.Keys(im.topics))
	sort.Strings(names)
	return names
}

// Partition returns a partition's state.
func (im *Image) Partition(topic string, p int32) (replica.PartitionState, bool) {
	t := im.topics[topic]
	if t == nil || p < 0 || int(p) >= len(t.Partitions) {
		return replica.PartitionState{}, false
	}
	return t.Partitions[p].Clone(), true
}

// Leads counts the partitions broker id leads.
func (im *Image) Leads(id int32) int {
	n := 0
	for _, t := range im.topics {
		for _, st := range t.Partitions {
			if st.Leader == id {
				n++
			}
		}
	}
	return n
}

// ApplyResult is what applying an entry produced, handed back to the
// controller that proposed it.
type ApplyResult struct {
	// BrokerEpoch is the epoch a RegisterBrokerRecord in the entry got.
	BrokerEpoch int64
	// Skipped counts records that did not apply (a stale partition change,
	// a change to a broker incarnation that is gone): the entry's
	// preconditions no longer held when it was applied.
	Skipped int
}

// apply returns the image after entry e at index. Records that do not
// apply are skipped and counted; nothing in e can make apply fail, so
// every node's image is the same function of the log.
func (im *Image) apply(e Entry, index uint64) (*Image, ApplyResult) {
	next := *im
	next.index = index
	var res ApplyResult
	cloned := map[string]bool{}
	brokersCloned, topicsCloned := false, false
	cloneBrokers := func() {
		if !brokersCloned {
			next.brokers = maps.Clone(next.brokers)
			brokersCloned = true
		}
	}
	cloneTopics := func() {
		if !topicsCloned {
			next.topics = maps.Clone(next.topics)
			next.byID = maps.Clone(next.byID)
			topicsCloned = true
		}
	}
	// topic returns a private copy of a topic to modify.
	topic := func(name string) *TopicInfo {
		t := next.topics[name]
		if t == nil {
			return nil
		}
		if !cloned[name] {
			cloneTopics()
			c := *t
			c.Partitions = slices.Clone(t.Partitions)
			t = &c
			next.topics[name] = t
			cloned[name] = true
		}
		return t
	}
	for _, r := range e.Records {
		switch {
		case r.Cluster != nil:
			if next.clusterID == "" {
				next.clusterID = r.Cluster.ClusterID
			} else {
				res.Skipped++
			}
		case r.RegisterBroker != nil:
			rb := r.RegisterBroker
			cloneBrokers()
			next.brokers[rb.BrokerID] = &BrokerInfo{ID: rb.BrokerID, IncarnationID: rb.IncarnationID, Epoch: int64(index),
				Kafka: rb.Kafka, Controller: rb.Controller, Rack: rb.Rack, Listeners: slices.Clone(rb.Listeners), Fenced: true}
			res.BrokerEpoch = int64(index)
		case r.BrokerChange != nil:
			bc := r.BrokerChange
			b := next.brokers[bc.BrokerID]
			if b == nil || b.Epoch != bc.BrokerEpoch {
				res.Skipped++
				continue
			}
			cloneBrokers()
			c := *b
			if bc.Fenced != nil {
				c.Fenced = *bc.Fenced
			}
			if bc.InControlledShutdown != nil {
				c.InControlledShutdown = *bc.InControlledShutdown
			}
			next.brokers[bc.BrokerID] = &c
		case r.UnregisterBroker != nil:
			ub := r.UnregisterBroker
			if b := next.brokers[ub.BrokerID]; b == nil || b.Epoch != ub.BrokerEpoch {
				res.Skipped++
				continue
			}
			cloneBrokers()
			delete(next.brokers, ub.BrokerID)
		case r.Topic != nil:
			tr := r.Topic
			if next.topics[tr.Name] != nil || next.byID[tr.ID] != "" {
				res.Skipped++
				continue
			}
			cloneTopics()
			next.topics[tr.Name] = &TopicInfo{Name: tr.Name, ID: tr.ID, Config: slices.Clone(tr.Config), Unclean: tr.Unclean, MinISR: tr.MinISR}
			next.byID[tr.ID] = tr.Name
			cloned[tr.Name] = true
		case r.RemoveTopic != nil:
			t := next.topics[r.RemoveTopic.Name]
			if t == nil || t.ID != r.RemoveTopic.ID {
				res.Skipped++
				continue
			}
			cloneTopics()
			delete(next.topics, t.Name)
			delete(next.byID, t.ID)
		case r.Partition != nil:
			pr := r.Partition
			t := next.topics[pr.Topic]
			if t == nil || t.ID != pr.TopicID || pr.Partition < 0 || int(pr.Partition) > len(t.Partitions) {
				res.Skipped++
				continue
			}
			st := pr.State()
			if int(pr.Partition) < len(t.Partitions) {
				cur := t.Partitions[pr.Partition]
				if !st.NewerThan(cur) || st.PartitionEpoch != cur.PartitionEpoch+1 || st.LeaderEpoch < cur.LeaderEpoch {
					res.Skipped++
					continue
				}
				t = topic(pr.Topic)
				t.Partitions[pr.Partition] = st
				continue
			}
			t = topic(pr.Topic)
			t.Partitions = append(t.Partitions, st)
		case r.TopicConfig != nil:
			tc := r.TopicConfig
			t := next.topics[tc.Name]
			if t == nil || t.ID != tc.ID || tc.Version != t.ConfigVersion+1 {
				res.Skipped++
				continue
			}
			t = topic(tc.Name)
			t.Config, t.ConfigVersion, t.Unclean, t.MinISR = slices.Clone(tc.Config), tc.Version, tc.Unclean, tc.MinISR
		case r.ProducerIDs != nil:
			if r.ProducerIDs.NextProducerID <= next.nextProducerID {
				res.Skipped++
				continue
			}
			next.nextProducerID = r.ProducerIDs.NextProducerID
		case r.Settings != nil:
			sr := r.Settings
			cur := next.settings[sr.Kind]
			if !sr.Kind.Valid() || sr.Version != cur.Version+1 {
				res.Skipped++
				continue
			}
			next.settings = maps.Clone(next.settings)
			if next.settings == nil {
				next.settings = map[SettingsKind]Settings{}
			}
			recent := cur.Recent
			if sr.ID != "" {
				recent = append(slices.Clone(recent), sr.ID)
				recent = recent[max(0, len(recent)-recentSettingsChanges):]
			}
			next.settings[sr.Kind] = Settings{Version: sr.Version, Data: slices.Clone(sr.Data), Recent: recent}
		case r.NoOp != nil:
		default:
			res.Skipped++
		}
	}
	return &next, res
}

// imageJSON is an Image as a snapshot stores it.
type imageJSON struct {
	Index          uint64                    `json:"index"`
	ClusterID      string                    `json:"cluster_id"`
	Brokers        []*BrokerInfo             `json:"brokers"`
	Topics         []*TopicInfo              `json:"topics"`
	NextProducerID int64                     `json:"next_producer_id"`
	Settings       map[SettingsKind]Settings `json:"settings,omitempty"`
}

// MarshalJSON encodes the image, for snapshots.
func (im *Image) MarshalJSON() ([]byte, error) {
	j := imageJSON{Index: im.index, ClusterID: im.clusterID, NextProducerID: im.nextProducerID, Settings: im.settings}
	for _, b := range im.Brokers() {
		j.Brokers = append(j.Brokers, &b)
	}
	for _, n := range im.Topics() {
		j.Topics = append(j.Topics, im.topics[n])
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encoded.
func (im *Image) UnmarshalJSON(data []byte) error {
	var j imageJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("controller: metadata snapshot: %w", err)
	}
	n := NewImage()
	n.index, n.clusterID, n.nextProducerID, n.settings = j.Index, j.ClusterID, j.NextProducerID, j.Settings
	for _, b := range j.Brokers {
		n.brokers[b.ID] = b
	}
	for _, t := range j.Topics {
		n.topics[t.Name] = t
		n.byID[t.ID] = t.Name
	}
	*im = *n
	return nil
}
