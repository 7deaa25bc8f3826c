package transport

import (
	"context"
	"fmt"
	"time"

	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/replica"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The operator's operations a node sends to the active controller's
// listener on behalf of a client that asked it (spool.Remote).

// controllerAttemptTimeout bounds one request to a controller listener
// (controllerRequest): every call a node makes to the active controller
// (registration, heartbeats, AlterPartition, producer ids, topic changes
// and the operator's operations) goes through it.
const controllerAttemptTimeout = 5 * time.Second

// controllerRequest sends req to the controller listener at addr, giving
// up after controllerAttemptTimeout as on an unreachable controller: one
// that hangs (paused, cut off) is left in time for the caller
// (spool's netCluster.call) to try the controller elected meanwhile, within
// its own deadline. A deposed controller cannot commit what it is sent; a
// slow one may, so the operations are safe to repeat (a repeated target
// changes nothing; the caller takes a repeated creation's, deletion's,
// partition addition's, cancellation's or unregistration's refusal as its
// own effect when the image agrees).
func (r *remote) controllerRequest(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	actx, cancel := context.WithTimeout(ctx, controllerAttemptTimeout)
	defer cancel()
	resp, err := r.peers.request(actx, addr, req)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		return nil, fmt.Errorf("%w: %s did not answer within %v", replica.ErrUnreachable, addr, controllerAttemptTimeout)
	}
	return resp, err
}

const (
	electLeadersVersion     = 2
	alterReassignVersion    = 1
	listReassignVersion     = 0
	unregisterBrokerVersion = 0
)

// remoteError is an error code another node answered for one partition,
// as the error of spool's layers it stands for (codeError), keeping the
// code itself: a forwarded answer reaches the client with the code the
// controller gave, not one guessed back from the error.
type remoteError struct {
	code int16
	err  error
}

func (e *remoteError) Error() string { return e.err.Error() }
func (e *remoteError) Unwrap() error { return e.err }

func remoteCodeError(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	return &remoteError{code: code, err: codeError(code, msg)}
}

// AlterPartitionReassignments implements spool.Remote.
func (r *remote) AlterPartitionReassignments(ctx context.Context, addr string, rs []controller.Reassignment, allowRFChange bool) ([]error, error) {
	kr := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	kr.Version = alterReassignVersion
	kr.AllowReplicationFactorChange = allowRFChange
	index := map[string]int{}
	for _, re := range rs {
		i, ok := index[re.Topic]
		if !ok {
			i = len(kr.Topics)
			index[re.Topic] = i
			t := kmsg.NewAlterPartitionAssignmentsRequestTopic()
			t.Topic = re.Topic
			kr.Topics = append(kr.Topics, t)
		}
		p := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
		p.Partition, p.Replicas = re.Partition, re.Replicas
		kr.Topics[i].Partitions = append(kr.Topics[i].Partitions, p)
	}
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return nil, err
	}
	ar := resp.(*kmsg.AlterPartitionAssignmentsResponse)
	if ar.ErrorCode != 0 {
		return nil, remoteCodeError(ar.ErrorCode, ar.ErrorMessage)
	}
	// The answer is grouped by topic in the order sent; hand each entry
	// its own.
	type key struct {
		topic string
		p     int32
	}
	answers := map[key][]error{}
	for _, t := range ar.Topics {
		for _, p := range t.Partitions {
			k := key{t.Topic, p.Partition}
			answers[k] = append(answers[k], remoteCodeError(p.ErrorCode, p.ErrorMessage))
		}
	}
	errs := make([]error, len(rs))
	for i, re := range rs {
		k := key{re.Topic, re.Partition}
		a := answers[k]
		if len(a) == 0 {
			return nil, fmt.Errorf("%w: no answer for %s-%d", errUnexpectedResponse, re.Topic, re.Partition)
		}
		errs[i], answers[k] = a[0], a[1:]
	}
	return errs, nil
}

// ListPartitionReassignments implements spool.Remote.
func (r *remote) ListPartitionReassignments(ctx context.Context, addr string, parts []controller.TopicPartition) ([]controller.OngoingReassignment, error) {
	kr := kmsg.NewPtrListPartitionReassignmentsRequest()
	kr.Version = listReassignVersion
	if parts != nil {
		kr.Topics = []kmsg.ListPartitionReassignmentsRequestTopic{}
		index := map[string]int{}
		for _, tp := range parts {
			i, ok := index[tp.Topic]
			if !ok {
				i = len(kr.Topics)
				index[tp.Topic] = i
				t := kmsg.NewListPartitionReassignmentsRequestTopic()
				t.Topic = tp.Topic
				kr.Topics = append(kr.Topics, t)
			}
			kr.Topics[i].Partitions = append(kr.Topics[i].Partitions, tp.Partition)
		}
	}
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return nil, err
	}
	lr := resp.(*kmsg.ListPartitionReassignmentsResponse)
	if lr.ErrorCode != 0 {
		return nil, remoteCodeError(lr.ErrorCode, lr.ErrorMessage)
	}
	var out []controller.OngoingReassignment
	for _, t := range lr.Topics {
		for _, p := range t.Partitions {
			o := controller.OngoingReassignment{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas}
			if len(p.AddingReplicas) > 0 {
				o.Adding = p.AddingReplicas
			}
			if len(p.RemovingReplicas) > 0 {
				o.Removing = p.RemovingReplicas
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// ElectLeaders implements spool.Remote.
func (r *remote) ElectLeaders(ctx context.Context, addr string, typ replica.ElectionType, parts []controller.TopicPartition) ([]controller.ElectionResult, error) {
	kr := kmsg.NewPtrElectLeadersRequest()
	kr.Version = electLeadersVersion
	kr.ElectionType = int8(typ)
	if parts != nil {
		kr.Topics = []kmsg.ElectLeadersRequestTopic{}
		index := map[string]int{}
		for _, tp := range parts {
			i, ok := index[tp.Topic]
			if !ok {
				i = len(kr.Topics)
				index[tp.Topic] = i
				t := kmsg.NewElectLeadersRequestTopic()
				t.Topic = tp.Topic
				kr.Topics = append(kr.Topics, t)
			}
			kr.Topics[i].Partitions = append(kr.Topics[i].Partitions, tp.Partition)
		}
	}
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return nil, err
	}
	er := resp.(*kmsg.ElectLeadersResponse)
	if er.ErrorCode != 0 {
		return nil, remoteCodeError(er.ErrorCode, nil)
	}
	var out []controller.ElectionResult
	for _, t := range er.Topics {
		for _, p := range t.Partitions {
			out = append(out, controller.ElectionResult{Topic: t.Topic, Partition: p.Partition, Err: remoteCodeError(p.ErrorCode, p.ErrorMessage)})
		}
	}
	return out, nil
}

// UnregisterBroker implements spool.Remote.
func (r *remote) UnregisterBroker(ctx context.Context, addr string, id int32) error {
	kr := kmsg.NewPtrUnregisterBrokerRequest()
	kr.Version = unregisterBrokerVersion
	kr.BrokerID = id
	resp, err := r.controllerRequest(ctx, addr, kr)
	if err != nil {
		return err
	}
	ur := resp.(*kmsg.UnregisterBrokerResponse)
	return remoteCodeError(ur.ErrorCode, ur.ErrorMessage)
}
