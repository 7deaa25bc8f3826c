package controller

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spoolmq/spool/replica"
)

// The metadata log holds one entry per controller operation; an entry is
// a list of records applied together or not at all (KRaft appends an
// operation's records as one atomic batch). Records mirror KRaft's
// (metadata/src/main/resources/common/metadata/*.json) but are encoded as
// JSON, so that `spool dump --records` of __cluster_metadata-0 is readable:
//
//	entry  = {"v":1,"records":[record, ...]}
//	record = {"cluster":{...}} | {"register_broker":{...}} | {"broker_change":{...}} |
//	         {"unregister_broker":{...}} | {"topic":{...}} | {"remove_topic":{...}} |
//	         {"partition":{...}} | {"topic_config":{...}} | {"producer_ids":{...}} |
//	         {"settings":{...}} | {"noop":{}}
//
// Exactly one field of a record is set. Applying is deterministic: the
// image after an entry depends only on the image before it, the entry and
// its Raft index (a broker's epoch is the index of the entry that
// registered it, as KRaft uses the registration record's offset).

// entryVersion is the version of the entry encoding.
const entryVersion = 1

// Entry is one controller operation's records.
type Entry struct {
	V       int      `json:"v"`
	Records []Record `json:"records"`
}

// Record is one metadata change; exactly one field is set.
type Record struct {
	Cluster          *ClusterRecord          `json:"cluster,omitempty"`
	RegisterBroker   *RegisterBrokerRecord   `json:"register_broker,omitempty"`
	BrokerChange     *BrokerChangeRecord     `json:"broker_change,omitempty"`
	UnregisterBroker *UnregisterBrokerRecord `json:"unregister_broker,omitempty"`
	Topic            *TopicRecord            `json:"topic,omitempty"`
	RemoveTopic      *RemoveTopicRecord      `json:"remove_topic,omitempty"`
	Partition        *PartitionRecord        `json:"partition,omitempty"`
	TopicConfig      *TopicConfigRecord      `json:"topic_config,omitempty"`
	ProducerIDs      *ProducerIDsRecord      `json:"producer_ids,omitempty"`
	Settings         *SettingsRecord         `json:"settings,omitempty"`
	NoOp             *NoOpRecord             `json:"noop,omitempty"`
}

// ClusterRecord names the cluster. The first active controller writes it
// once; every node adopts it and refuses peers of another cluster.
type ClusterRecord struct {
	ClusterID string `json:"cluster_id"`
}

// Endpoint is where a broker serves.
type Endpoint struct {
	Host string `json:"host"`
	Port int32  `json:"port"`
}

// NamedEndpoint is one of a broker's Kafka listeners, by name (Kafka's
// listener names: PLAINTEXT, SSL, or a name of the operator's).
type NamedEndpoint struct {
	Name string `json:"name"`
	Host string `json:"host"`
	Port int32  `json:"port"`
}

// RegisterBrokerRecord registers a broker incarnation (KRaft's
// RegisterBrokerRecord). Its epoch is the index of the entry holding it. A
// broker registers fenced.
type RegisterBrokerRecord struct {
	BrokerID      int32    `json:"broker_id"`
	IncarnationID string   `json:"incarnation_id"`
	Kafka         Endpoint `json:"kafka"`
	// Controller is the broker's controller listener (Raft and the
	// controller RPCs), for a node that is not a voter.
	Controller string `json:"controller,omitempty"`
	Rack       string `json:"rack,omitempty"`
	// Listeners are the broker's named Kafka listeners (Kafka's
	// advertised.listeners), Kafka's first - the one the nodes use among
	// themselves; none: one unnamed listener, Kafka, told to every
	// client. Clients are told each broker's endpoint on the listener
	// they came in on.
	Listeners []NamedEndpoint `json:"listeners,omitempty"`
}

// BrokerChangeRecord fences or unfences a broker, or marks its controlled
// shutdown (KRaft's BrokerRegistrationChangeRecord). It applies only to
// the registration with BrokerEpoch.
type BrokerChangeRecord struct {
	BrokerID             int32 `json:"broker_id"`
	BrokerEpoch          int64 `json:"broker_epoch"`
	Fenced               *bool `json:"fenced,omitempty"`
	InControlledShutdown *bool `json:"in_controlled_shutdown,omitempty"`
}

// UnregisterBrokerRecord removes a broker's registration.
type UnregisterBrokerRecord struct {
	BrokerID    int32 `json:"broker_id"`
	BrokerEpoch int64 `json:"broker_epoch"`
}

// TopicRecord creates a topic; its partitions follow as PartitionRecords
// in the same entry.
type TopicRecord struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// Config is the topic's own settings in the broker's encoding (the
	// controller does not interpret it); Unclean and MinISR are the two
	// settings the controller's and leaders' rules need.
	Config  json.RawMessage `json:"config,omitempty"`
	Unclean bool            `json:"unclean,omitempty"`
	MinISR  int             `json:"min_isr,omitempty"`
}

// RemoveTopicRecord deletes a topic and its partitions.
type RemoveTopicRecord struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

// PartitionRecord is a partition's whole new state: its first (a new
// partition) or a change. A change applies only if it is newer than the
// image's state (replica.PartitionState.NewerThan) and bumps the partition
// epoch by exactly one; anything else is ignored, so a stale change
// committed late cannot move a partition backwards.
type PartitionRecord struct {
	TopicID        string  `json:"topic_id"`
	Topic          string  `json:"topic"`
	Partition      int32   `json:"partition"`
	Replicas       []int32 `json:"replicas"`
	Leader         int32   `json:"leader"`
	LeaderEpoch    int32   `json:"leader_epoch"`
	ISR            []int32 `json:"isr"`
	PartitionEpoch int32   `json:"partition_epoch"`
	// Adding and Removing are an ongoing reassignment's replicas (KRaft's
	// AddingReplicas and RemovingReplicas; KIP-455), absent when none
	// runs - as in every record written before reassignments existed.
	Adding   []int32 `json:"adding_replicas,omitempty"`
	Removing []int32 `json:"removing_replicas,omitempty"`
}

// State is the record as a replica.PartitionState.
func (r *PartitionRecord) State() replica.PartitionState {
	return replica.PartitionState{Topic: r.Topic, Partition: r.Partition, Replicas: r.Replicas, Leader: r.Leader,
		LeaderEpoch: r.LeaderEpoch, ISR: r.ISR, PartitionEpoch: r.PartitionEpoch,
		AddingReplicas: r.Adding, RemovingReplicas: r.Removing}.Clone()
}

func partitionRecord(topicID string, st replica.PartitionState) Record {
	st = st.Clone()
	return Record{Partition: &PartitionRecord{TopicID: topicID, Topic: st.Topic, Partition: st.Partition, Replicas: st.Replicas,
		Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, ISR: st.ISR, PartitionEpoch: st.PartitionEpoch,
		Adding: st.AddingReplicas, Removing: st.RemovingReplicas}}
}

// TopicConfigRecord replaces a topic's own settings. It applies only if
// the topic's config version is Version-1, so two changes computed from
// the same settings cannot both apply.
type TopicConfigRecord struct {
	Name    string          `json:"name"`
	ID      string          `json:"id"`
	Version int64           `json:"version"`
	Config  json.RawMessage `json:"config,omitempty"`
	Unclean bool            `json:"unclean,omitempty"`
	MinISR  int             `json:"min_isr,omitempty"`
}

// SettingsRecord replaces one of the cluster's settings documents: the
// state every broker holds in memory and enforces alike (KRaft's
// AccessControlEntryRecord, ClientQuotaRecord and UserScramCredentialRecord
// each carry a part of it; here a change carries the whole document of its
// kind, which the brokers' packages encode). It applies only if Version
// is the document's current version plus one.
type SettingsRecord struct {
	Kind    SettingsKind    `json:"kind"`
	Version int64           `json:"version"`
	Data    json.RawMessage `json:"data"`
	// ID names the change (SettingsChange.ID), so that its sender can
	// recognise it after an answer it did not get.
	ID string `json:"id,omitempty"`
}

// SettingsKind names a settings document.
type SettingsKind string

// The settings documents.
const (
	SettingsACLs   SettingsKind = "acls"   // package acl's bindings
	SettingsQuotas SettingsKind = "quotas" // package quota's client quotas
	SettingsSCRAM  SettingsKind = "scram"  // SCRAM credentials set over the protocol (salts and keys)
)

// Valid reports whether k is a known kind.
func (k SettingsKind) Valid() bool {
	return k == SettingsACLs || k == SettingsQuotas || k == SettingsSCRAM
}

// ProducerIDsRecord hands a broker the block of producer ids below
// NextProducerID (KRaft's ProducerIdsRecord): the next block starts there.
type ProducerIDsRecord struct {
	BrokerID       int32 `json:"broker_id"`
	BrokerEpoch    int64 `json:"broker_epoch"`
	NextProducerID int64 `json:"next_producer_id"`
}

// NoOpRecord changes nothing; a new active controller commits one to learn
// that its image is current.
type NoOpRecord struct{}

// ErrBadMetadataEntry reports a metadata log entry that does not decode.
var ErrBadMetadataEntry = errors.New("controller: bad metadata entry")

// EncodeEntry encodes records as one entry. It fails only for a topic
// config that is not valid JSON.
func EncodeEntry(recs ...Record) ([]byte, error) {
	data, err := json.Marshal(Entry{V: entryVersion, Records: recs})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMetadataEntry, err)
	}
	return data, nil
}

// DecodeEntry decodes an entry.
func DecodeEntry(data []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("%w: %v", ErrBadMetadataEntry, err)
	}
	if e.V != entryVersion {
		return e, fmt.Errorf("%w: version %d", ErrBadMetadataEntry, e.V)
	}
	return e, nil
}
