package transport

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Versions of the requests a node sends to other nodes: ones this package
// serves (so that nodes of one release understand each other).
const (
	fetchVersion          = 12 // a node's own consumer fetches: topics by name
	replicaFetchVersion   = 15 // followers: topics by id, ReplicaState with the broker epoch (KIP-903)
	epochVersion          = 4
	registrationVersion   = 3
	heartbeatVersion      = 1
	alterPartitionVersion = 3 // topics by id; ISR members with their broker epochs (KIP-903)
	allocatePIDsVersion   = 0
	createTopicsVersion   = 7
	deleteTopicsVersion   = 6
	createPartsVersion    = 3
	alterConfigsVersion   = 2
)

// remote is spool.Remote over the Kafka protocol: followers' fetches go to
// the leader's Kafka listener, controller requests to a controller
// listener.
type remote struct {
	peers *peers
	// b is the node's broker once it is open: broker addresses and topic
	// ids come from its metadata image.
	b atomic.Pointer[spool.Broker]
}

func newRemote(dial func(ctx context.Context, addr string) (net.Conn, error)) *remote {
	return &remote{peers: newPeers(dial)}
}

// brokerAddr is the Kafka listener of broker id, as registered.
func (r *remote) brokerAddr(id int32) (string, error) {
	b := r.b.Load()
	if b == nil || b.Quorum() == nil {
		return "", fmt.Errorf("%w: broker %d: this node has not started", replica.ErrUnreachable, id)
	}
	bi, ok := b.Quorum().Image().Broker(id)
	if !ok {
		return "", fmt.Errorf("%w: broker %d is not registered", replica.ErrUnreachable, id)
	}
	return net.JoinHostPort(bi.Kafka.Host, strconv.Itoa(int(bi.Kafka.Port))), nil
}

func (r *remote) topicID(name string) ([16]byte, error) {
	b := r.b.Load()
	if b == nil || b.Quorum() == nil {
		return [16]byte{}, fmt.Errorf("%w: %q", replica.ErrUnknownTopic, name)
	}
	t, ok := b.Quorum().Image().Topic(name)
	if !ok {
		return [16]byte{}, fmt.Errorf("%w: %q", replica.ErrUnknownTopic, name)
	}
	id, err := spool.ParseTopicID(t.ID)
	return [16]byte(id), err
}

// Link implements replica.Network.
func (r *remote) Link(from, to int32) replica.Link { return &link{r: r, to: to} }

type link struct {
	r  *remote
	to int32
}

// Fetch implements replica.Link with Kafka's Fetch from a replica.
func (l *link) Fetch(ctx context.Context, req *replica.FetchRequest) (*replica.FetchResponse, error) {
	addr, err := l.r.brokerAddr(l.to)
	if err != nil {
		return nil, err
	}
	id, err := l.r.topicID(req.Topic)
	if err != nil {
		return nil, err
	}
	kr := kmsg.NewPtrFetchRequest()
	kr.Version = replicaFetchVersion
	kr.ReplicaID = -1
	kr.ReplicaState.ID, kr.ReplicaState.Epoch = req.ReplicaID, req.BrokerEpoch
	kr.MaxWaitMillis = int32(req.MaxWait / time.Millisecond)
	kr.MinBytes = 1
	kr.MaxBytes = int32(max(req.MaxBytes, 1))
	kr.SessionEpoch = -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic, t.TopicID = req.Topic, id
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition, p.CurrentLeaderEpoch, p.FetchOffset, p.LastFetchedEpoch = req.Partition, req.CurrentLeaderEpoch, req.FetchOffset, req.LastFetchedEpoch
	p.LogStartOffset, p.PartitionMaxBytes = -1, int32(max(req.MaxBytes, 1))
	t.Partitions = append(t.Partitions, p)
	kr.Topics = append(kr.Topics, t)
	ctx, cancel := context.WithTimeout(ctx, req.MaxWait+30*time.Second)
	defer cancel()
	resp, err := l.r.peers.request(ctx, addr, kr)
	if err != nil {
		return nil, err
	}
	fr := resp.(*kmsg.FetchResponse)
	if fr.ErrorCode != 0 {
		return nil, codeError(fr.ErrorCode, nil)
	}
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("%w: fetch response with %d topics", errUnexpectedResponse, len(fr.Topics))
	}
	fp := &fr.Topics[0].Partitions[0]
	switch fp.ErrorCode {
	case 0:
	case errOffsetOutOfRange:
		return nil, &replica.OffsetOutOfRangeError{Offset: req.FetchOffset, LogStartOffset: fp.LogStartOffset, LogEndOffset: fp.HighWatermark}
	default:
		return nil, codeError(fp.ErrorCode, nil)
	}
	out := &replica.FetchResponse{Records: fp.RecordBatches, HighWatermark: fp.HighWatermark, LogStartOffset: fp.LogStartOffset, LogEndOffset: fp.LastStableOffset}
	if fp.DivergingEpoch.Epoch >= 0 {
		out.Diverging = &replica.EpochEnd{Epoch: fp.DivergingEpoch.Epoch, EndOffset: fp.DivergingEpoch.EndOffset}
	}
	return out, nil
}

// EndOffsetForEpoch implements replica.Link with OffsetForLeaderEpoch from
// a replica.
func (l *link) EndOffsetForEpoch(ctx context.Context, req *replica.EpochRequest) (replica.EpochEnd, error) {
	addr, err := l.r.brokerAddr(l.to)
	if err != nil {
		return replica.EpochEnd{}, err
	}
	kr := kmsg.NewPtrOffsetForLeaderEpochRequest()
	kr.Version = epochVersion
	kr.ReplicaID = req.ReplicaID
	t := kmsg.NewOffsetForLeaderEpochRequestTopic()
	t.Topic = req.Topic
	p := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	p.Partition, p.CurrentLeaderEpoch, p.LeaderEpoch = req.Partition, req.CurrentLeaderEpoch, req.Epoch
	t.Partitions = append(t.Partitions, p)
	kr.Topics = append(kr.Topics, t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := l.r.peers.request(ctx, addr, kr)
	if err != nil {
		return replica.EpochEnd{}, err
	}
	er := resp.(*kmsg.OffsetForLeaderEpochResponse)
	if len(er.Topics) != 1 || len(er.Topics[0].Partitions) != 1 {
		return replica.EpochEnd{}, fmt.Errorf("%w: offsets-for-epoch response with %d topics", errUnexpectedResponse, len(er.Topics))
	}
	ep := er.Topics[0].Partitions[0]
	if ep.ErrorCode != 0 {
		return replica.EpochEnd{}, codeError(ep.ErrorCode, nil)
	}
	return replica.EpochEnd{Epoch: ep.LeaderEpoch, EndOffset: ep.EndOffset}, nil
}

// incarnationBytes turns the controller's incarnation id (hex of 16
// bytes) into the request's UUID, and back.
func incarnationBytes(s string) [16]byte {
	var out [16]byte
	hex.Decode(out[:], []byte(s))
	return out
}

func incarnationString(b [16]byte) string { return hex.EncodeToString(b[:]) }

// controllerListenerName names the listener a non-voting node registers
// as its controller address.
const controllerListenerName = "CONTROLLER"

// RegisterBroker implements spool.Remote with BrokerRegistration.
func (r *remote) RegisterBroker(ctx context.Context, addr string, reg controller.Registration) (int64, error) {
	kr := kmsg.NewPtrBrokerRegistrationRequest()
	kr.Version = registrationVersion
	kr.BrokerID, kr.ClusterID, kr.IncarnationID = reg.BrokerID, reg.ClusterID, incarnationBytes(reg.IncarnationID)
	kr.PreviousBrokerEpoch = -1
	// The listener the nodes use among themselves comes first; a node
	// with one unnamed listener (NodeConfig.Listen) sends it without a
	// name: clients of any listener are told it.
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = "", reg.Kafka.Host, uint16(reg.Kafka.Port)
	kr.Listeners = append(kr.Listeners, l)
	if len(reg.Listeners) > 0 {
		// In their order: the first is the nodes' own (Kafka).
		kr.Listeners = kr.Listeners[:0]
		for _, e := range reg.Listeners {
			l := kmsg.NewBrokerRegistrationRequestListener()
			l.Name, l.Host, l.Port = e.Name, e.Host, uint16(e.Port)
			kr.Listeners = append(kr.Listeners, l)
		}
	}
	if reg.Controller != "" {
		host, port, err := net.SplitHostPort(reg.Controller)
		if err != nil {
			return 0, err
		}
		n, _ := strconv.Atoi(port)
		l := kmsg.NewBrokerRegistrationRequestListener()
		l.Name, l.Host, l.Port = controllerListenerName, host, uint16(n)
		kr.Listeners = append(kr.Listeners, l)
	}
	if reg.Rack != "" {
		kr.Rack = &reg.Rack
	}
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return 0, err
	}
	rr := resp.(*kmsg.BrokerRegistrationResponse)
	if rr.ErrorCode != 0 {
		return 0, codeError(rr.ErrorCode, nil)
	}
	return rr.BrokerEpoch, nil
}

// BrokerHeartbeat implements spool.Remote.
func (r *remote) BrokerHeartbeat(ctx context.Context, addr string, h controller.Heartbeat) (controller.HeartbeatResult, error) {
	kr := kmsg.NewPtrBrokerHeartbeatRequest()
	kr.Version = heartbeatVersion
	kr.BrokerID, kr.BrokerEpoch, kr.CurrentMetadataOffset = h.BrokerID, h.BrokerEpoch, int64(h.MetadataIndex)
	kr.WantFence, kr.WantShutdown = h.WantFence, h.WantShutdown
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return controller.HeartbeatResult{}, err
	}
	hr := resp.(*kmsg.BrokerHeartbeatResponse)
	if hr.ErrorCode != 0 {
		return controller.HeartbeatResult{}, codeError(hr.ErrorCode, nil)
	}
	return controller.HeartbeatResult{IsCaughtUp: hr.IsCaughtUp, IsFenced: hr.IsFenced, ShouldShutdown: hr.ShouldShutdown}, nil
}

// AlterPartition implements spool.Remote. The state returned carries no
// replicas (the response has none): the caller knows them.
func (r *remote) AlterPartition(ctx context.Context, addr string, req replica.AlterPartitionRequest) (replica.PartitionState, error) {
	id, err := r.topicID(req.Topic)
	if err != nil {
		return replica.PartitionState{}, err
	}
	kr := kmsg.NewPtrAlterPartitionRequest()
	kr.Version = alterPartitionVersion
	kr.BrokerID, kr.BrokerEpoch = req.Leader, -1
	t := kmsg.NewAlterPartitionRequestTopic()
	t.TopicID = id
	p := kmsg.NewAlterPartitionRequestTopicPartition()
	p.Partition, p.LeaderEpoch, p.PartitionEpoch = req.Partition, req.LeaderEpoch, req.PartitionEpoch
	for _, m := range req.ISR {
		e := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
		e.BrokerID, e.BrokerEpoch = m, -1
		if be, ok := req.BrokerEpochs[m]; ok {
			e.BrokerEpoch = be
		}
		p.NewEpochISR = append(p.NewEpochISR, e)
	}
	t.Partitions = append(t.Partitions, p)
	kr.Topics = append(kr.Topics, t)
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return replica.PartitionState{}, err
	}
	ar := resp.(*kmsg.AlterPartitionResponse)
	if ar.ErrorCode != 0 {
		return replica.PartitionState{}, codeError(ar.ErrorCode, nil)
	}
	if len(ar.Topics) != 1 || len(ar.Topics[0].Partitions) != 1 {
		return replica.PartitionState{}, fmt.Errorf("%w: alter-partition response with %d topics", errUnexpectedResponse, len(ar.Topics))
	}
	ap := ar.Topics[0].Partitions[0]
	if ap.ErrorCode != 0 {
		return replica.PartitionState{}, codeError(ap.ErrorCode, nil)
	}
	return replica.PartitionState{Topic: req.Topic, Partition: ap.Partition, Leader: ap.LeaderID, LeaderEpoch: ap.LeaderEpoch,
		ISR: ap.ISR, PartitionEpoch: ap.PartitionEpoch}, nil
}

// AllocateProducerIDs implements spool.Remote.
func (r *remote) AllocateProducerIDs(ctx context.Context, addr string, broker int32, brokerEpoch int64) (int64, error) {
	kr := kmsg.NewPtrAllocateProducerIDsRequest()
	kr.Version = allocatePIDsVersion
	kr.BrokerID, kr.BrokerEpoch = broker, brokerEpoch
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return 0, err
	}
	ar := resp.(*kmsg.AllocateProducerIDsResponse)
	if ar.ErrorCode != 0 {
		return 0, codeError(ar.ErrorCode, nil)
	}
	if ar.ProducerIDLen != controller.ProducerIDBlock {
		return 0, fmt.Errorf("%w: a block of %d producer ids", errUnexpectedResponse, ar.ProducerIDLen)
	}
	return ar.ProducerIDStart, nil
}

// topicConfigEntries are the Kafka settings a topic sets itself.
func topicConfigEntries(own spool.TopicConfig) map[string]string {
	out := map[string]string{}
	for _, k := range topicKeys {
		if k.isSet(own) {
			out[k.name] = k.get(own)
		}
	}
	return out
}

// CreateTopic implements spool.Remote with CreateTopics.
func (r *remote) CreateTopic(ctx context.Context, addr string, name string, cfg spool.TopicConfig) error {
	kr := kmsg.NewPtrCreateTopicsRequest()
	kr.Version = createTopicsVersion
	kr.TimeoutMillis = 30000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = name, -1, -1
	if cfg.Partitions > 0 {
		t.NumPartitions = cfg.Partitions
	}
	if cfg.ReplicationFactor > 0 {
		t.ReplicationFactor = int16(cfg.ReplicationFactor)
	}
	for k, v := range topicConfigEntries(cfg) {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, &v
		t.Configs = append(t.Configs, c)
	}
	kr.Topics = append(kr.Topics, t)
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return err
	}
	cr := resp.(*kmsg.CreateTopicsResponse)
	if len(cr.Topics) != 1 {
		return fmt.Errorf("%w: create-topics response with %d topics", errUnexpectedResponse, len(cr.Topics))
	}
	return codeError(cr.Topics[0].ErrorCode, cr.Topics[0].ErrorMessage)
}

// DeleteTopic implements spool.Remote with DeleteTopics.
func (r *remote) DeleteTopic(ctx context.Context, addr string, name string) error {
	kr := kmsg.NewPtrDeleteTopicsRequest()
	kr.Version = deleteTopicsVersion
	kr.TimeoutMillis = 30000
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = &name
	kr.Topics = append(kr.Topics, t)
	kr.TopicNames = append(kr.TopicNames, name)
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return err
	}
	dr := resp.(*kmsg.DeleteTopicsResponse)
	if len(dr.Topics) != 1 {
		return fmt.Errorf("%w: delete-topics response with %d topics", errUnexpectedResponse, len(dr.Topics))
	}
	return codeError(dr.Topics[0].ErrorCode, dr.Topics[0].ErrorMessage)
}

// CreatePartitions implements spool.Remote.
func (r *remote) CreatePartitions(ctx context.Context, addr string, name string, total int32) error {
	kr := kmsg.NewPtrCreatePartitionsRequest()
	kr.Version = createPartsVersion
	kr.TimeoutMillis = 30000
	t := kmsg.NewCreatePartitionsRequestTopic()
	t.Topic, t.Count = name, total
	kr.Topics = append(kr.Topics, t)
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return err
	}
	cr := resp.(*kmsg.CreatePartitionsResponse)
	if len(cr.Topics) != 1 {
		return fmt.Errorf("%w: create-partitions response with %d topics", errUnexpectedResponse, len(cr.Topics))
	}
	return codeError(cr.Topics[0].ErrorCode, cr.Topics[0].ErrorMessage)
}

// AlterTopicConfig implements spool.Remote with AlterConfigs, which
// replaces a topic's settings whole.
func (r *remote) AlterTopicConfig(ctx context.Context, addr string, name string, cfg spool.TopicConfig) error {
	res := kmsg.NewAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, name
	for k, v := range topicConfigEntries(cfg) {
		c := kmsg.NewAlterConfigsRequestResourceConfig()
		c.Name, c.Value = k, &v
		res.Configs = append(res.Configs, c)
	}
	rr, err := r.alterConfigs(ctx, addr, res)
	if err != nil {
		return err
	}
	return codeError(rr.ErrorCode, rr.ErrorMessage)
}

// alterConfigs sends one resource's AlterConfigs to a controller
// listener and returns its answer.
func (r *remote) alterConfigs(ctx context.Context, addr string, res kmsg.AlterConfigsRequestResource) (kmsg.AlterConfigsResponseResource, error) {
	kr := kmsg.NewPtrAlterConfigsRequest()
	kr.Version = alterConfigsVersion
	kr.Resources = append(kr.Resources, res)
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return kmsg.AlterConfigsResponseResource{}, err
	}
	ar := resp.(*kmsg.AlterConfigsResponse)
	if len(ar.Resources) != 1 {
		return kmsg.AlterConfigsResponseResource{}, fmt.Errorf("%w: alter-configs response with %d resources", errUnexpectedResponse, len(ar.Resources))
	}
	return ar.Resources[0], nil
}

// AlterSettings implements spool.Remote with AlterConfigs of spool's
// private settingsResource, on the controller listener only.
func (r *remote) AlterSettings(ctx context.Context, addr string, ch controller.SettingsChange) error {
	res := kmsg.NewAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = settingsResource, string(ch.Kind)
	base, data, id := strconv.FormatInt(ch.BaseVersion, 10), string(ch.Data), ch.ID
	for k, v := range map[string]*string{settingsBaseVersion: &base, settingsData: &data, settingsID: &id} {
		c := kmsg.NewAlterConfigsRequestResourceConfig()
		c.Name, c.Value = k, v
		res.Configs = append(res.Configs, c)
	}
	rr, err := r.alterConfigs(ctx, addr, res)
	if err != nil {
		return err
	}
	if rr.ErrorCode == errInvalidUpdateVersion {
		return fmt.Errorf("%w (from %s)", controller.ErrConfigChanged, addr)
	}
	return codeError(rr.ErrorCode, rr.ErrorMessage)
}

// codeError turns a Kafka error code from another node into the error of
// spool's layers it stands for (the inverse of errorCode), so that the
// caller's retry decisions work across processes; other codes keep kerr's
// description.
func codeError(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	var base error
	switch code {
	case errNotController:
		base = &controller.NotControllerError{Leader: -1}
	case errNotLeaderOrFollower:
		base = replica.ErrNotLeader
	case errInvalidProducerEpoch:
		base = partition.ErrInvalidProducerEpoch
	case errTransactionCoordinatorFenced:
		base = partition.ErrTransactionCoordinatorFenced
	case errLeaderNotAvailable:
		base = replica.ErrLeaderNotAvailable
	case errFencedLeaderEpoch:
		base = replica.ErrFencedLeaderEpoch
	case errUnknownLeaderEpoch:
		base = replica.ErrUnknownLeaderEpoch
	case errUnknownTopicOrPartition:
		base = replica.ErrUnknownPartition
	case errOffsetOutOfRange:
		base = log.ErrOffsetOutOfRange
	case errInvalidUpdateVersion:
		base = replica.ErrStaleState
	case errNewLeaderElected:
		base = replica.ErrNewLeaderElected
	case errInvalidReplicaAssignment:
		base = replica.ErrInvalidReplicaAssignment
	case errNoReassignmentInProgress:
		base = replica.ErrNoReassignmentInProgress
	case errElectionNotNeeded:
		base = replica.ErrElectionNotNeeded
	case errPreferredLeaderNotAvailable:
		base = replica.ErrPreferredLeaderNotAvailable
	case errEligibleLeadersNotAvailable:
		base = replica.ErrEligibleLeadersNotAvailable
	case errBrokerIDNotRegistered:
		base = controller.ErrBrokerNotRegistered
	case errIneligibleReplica:
		base = replica.ErrIneligibleReplica
	case errStaleBrokerEpoch:
		base = controller.ErrStaleBrokerEpoch
	case errDuplicateBrokerRegistration:
		base = controller.ErrDuplicateRegistration
	case errInconsistentClusterID:
		base = controller.ErrInconsistentClusterID
	case errTopicAlreadyExists:
		base = replica.ErrTopicExists
	case errInvalidReplicationFactor:
		base = replica.ErrNotEnoughBrokers
	case errInvalidConfig, errInvalidPartitions, errInvalidRequest, errInvalidTopicException, errPolicyViolation:
		base = spool.ErrInvalidConfig
	case errCorruptMessage:
		base = record.ErrCorrupt
	case errRequestTimedOut:
		base = context.DeadlineExceeded
	default:
		base = kerr.ErrorForCode(code)
		if base == nil {
			base = errors.New("unknown error code " + strconv.Itoa(int(code)))
		}
	}
	if msg != nil && *msg != "" {
		return fmt.Errorf("%w: %s", base, *msg)
	}
	return base
}

// produceVersion and fetchConsumerVersion are the versions of a node's
// own produce and consumer fetch requests.
const produceVersion = 9

// Produce implements spool.Remote with Kafka's Produce.
func (r *remote) Produce(ctx context.Context, broker int32, topic string, partition int32, b record.Batch, opts spool.ProduceOptions) (int64, error) {
	addr, err := r.brokerAddr(broker)
	if err != nil {
		return -1, err
	}
	kr := kmsg.NewPtrProduceRequest()
	kr.Version = produceVersion
	kr.Acks = -1
	switch opts.Acks {
	case spool.AcksLeader:
		kr.Acks = 1
	case spool.AcksNone:
		kr.Acks = 1 // a node's own writes are always answered: acks=0 would give no offset
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	kr.TimeoutMillis = int32(timeout / time.Millisecond)
	t := kmsg.NewProduceRequestTopic()
	t.Topic = topic
	p := kmsg.NewProduceRequestTopicPartition()
	p.Partition, p.Records = partition, b.Bytes()
	t.Partitions = append(t.Partitions, p)
	kr.Topics = append(kr.Topics, t)
	resp, err := r.peers.request(ctx, addr, kr)
	if err != nil {
		return -1, err
	}
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		return -1, fmt.Errorf("%w: produce response with %d topics", errUnexpectedResponse, len(pr.Topics))
	}
	pp := pr.Topics[0].Partitions[0]
	if pp.ErrorCode != 0 {
		return -1, codeError(pp.ErrorCode, pp.ErrorMessage)
	}
	return pp.BaseOffset, nil
}

// Fetch implements spool.Remote: Kafka's Fetch as a consumer, reading
// what is committed now (no wait); offset -1 asks ListOffsets for the high
// watermark and log start offset instead.
func (r *remote) Fetch(ctx context.Context, broker int32, topic string, partition int32, offset int64, maxBytes int) (spool.RemoteFetch, error) {
	addr, err := r.brokerAddr(broker)
	if err != nil {
		return spool.RemoteFetch{}, err
	}
	if offset < 0 {
		var out spool.RemoteFetch
		for _, ts := range []int64{-2, -1} { // earliest, latest (the high watermark)
			lr := kmsg.NewPtrListOffsetsRequest()
			lr.Version = 4
			lr.ReplicaID = -1
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = topic
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Partition, p.Timestamp, p.CurrentLeaderEpoch = partition, ts, -1
			t.Partitions = append(t.Partitions, p)
			lr.Topics = append(lr.Topics, t)
			resp, err := r.peers.request(ctx, addr, lr)
			if err != nil {
				return out, err
			}
			lo := resp.(*kmsg.ListOffsetsResponse)
			if len(lo.Topics) != 1 || len(lo.Topics[0].Partitions) != 1 {
				return out, fmt.Errorf("%w: list-offsets response with %d topics", errUnexpectedResponse, len(lo.Topics))
			}
			lp := lo.Topics[0].Partitions[0]
			if lp.ErrorCode != 0 {
				return out, codeError(lp.ErrorCode, nil)
			}
			if ts == -2 {
				out.LogStartOffset = lp.Offset
			} else {
				out.HighWatermark = lp.Offset
			}
		}
		return out, nil
	}
	kr := kmsg.NewPtrFetchRequest()
	kr.Version = fetchVersion
	kr.ReplicaID = -1
	kr.MinBytes, kr.MaxBytes, kr.SessionEpoch = 0, int32(max(maxBytes, 1)), -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic = topic
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition, p.CurrentLeaderEpoch, p.FetchOffset, p.LastFetchedEpoch = partition, -1, offset, -1
	p.LogStartOffset, p.PartitionMaxBytes = -1, int32(max(maxBytes, 1))
	t.Partitions = append(t.Partitions, p)
	kr.Topics = append(kr.Topics, t)
	resp, err := r.peers.request(ctx, addr, kr)
	if err != nil {
		return spool.RemoteFetch{}, err
	}
	fr := resp.(*kmsg.FetchResponse)
	if fr.ErrorCode != 0 {
		return spool.RemoteFetch{}, codeError(fr.ErrorCode, nil)
	}
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return spool.RemoteFetch{}, fmt.Errorf("%w: fetch response with %d topics", errUnexpectedResponse, len(fr.Topics))
	}
	fp := &fr.Topics[0].Partitions[0]
	if fp.ErrorCode != 0 {
		return spool.RemoteFetch{}, codeError(fp.ErrorCode, nil)
	}
	// Hand on whole, verified batches only: a broker never sends a
	// damaged one, but a network can damage one.
	out := spool.RemoteFetch{HighWatermark: fp.HighWatermark, LogStartOffset: fp.LogStartOffset}
	for rest := fp.RecordBatches; len(rest) > 0; {
		b, n, err := record.ParseBatch(rest)
		if err != nil {
			break // a partial last batch (the size limit)
		}
		if err := b.Verify(); err != nil {
			return out, fmt.Errorf("%w: batch at %d from broker %d", record.ErrCorrupt, b.BaseOffset(), broker)
		}
		rest = rest[n:]
		out.Batches = fp.RecordBatches[:len(fp.RecordBatches)-len(rest)]
	}
	return out, nil
}

// WriteTxnMarker implements spool.Remote: Kafka's WriteTxnMarkers to the
// partition's leader, one marker for one partition.
func (r *remote) WriteTxnMarker(ctx context.Context, broker int32, topic string, partition int32, m spool.TxnMarker) error {
	addr, err := r.brokerAddr(broker)
	if err != nil {
		return err
	}
	kr := kmsg.NewPtrWriteTxnMarkersRequest()
	kr.Version = 1
	km := kmsg.NewWriteTxnMarkersRequestMarker()
	km.ProducerID, km.ProducerEpoch, km.Committed, km.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
	kt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	kt.Topic, kt.Partitions = topic, []int32{partition}
	km.Topics = append(km.Topics, kt)
	kr.Markers = append(kr.Markers, km)
	resp, err := r.peers.request(ctx, addr, kr)
	if err != nil {
		return err
	}
	wr := resp.(*kmsg.WriteTxnMarkersResponse)
	if len(wr.Markers) != 1 || len(wr.Markers[0].Topics) != 1 || len(wr.Markers[0].Topics[0].Partitions) != 1 {
		return fmt.Errorf("%w: write txn markers response of another shape", errUnexpectedResponse)
	}
	return codeError(wr.Markers[0].Topics[0].Partitions[0].ErrorCode, nil)
}
