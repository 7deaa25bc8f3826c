package transport

import (
	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FindCoordinator v0-v6. A standalone node coordinates every group; in a
// cluster a group's coordinator is the leader of its __consumer_offsets
// partition (created when the first group asks), a transactional id's the
// leader of its __transaction_state partition (likewise). There are no
// share groups.
//
//   - v1 adds the key type (0 group, 1 transaction) and an error message.
//   - v3 is the first flexible version.
//   - v4 batches keys (CoordinatorKeys, KIP-699).
//   - v5 only allows TRANSACTION_ABORTABLE, which needs transactions.
//   - v6 adds key type 2, share-group partitions (KIP-932).
func init() { register(kmsg.FindCoordinator, 0, 6, findCoordinator) }

// Coordinator key types (FindCoordinatorRequest.KeyType).
const (
	coordinatorGroup       int8 = 0
	coordinatorTransaction int8 = 1
	coordinatorShare       int8 = 2 // v6+
)

func findCoordinator(c *conn, req *request, body *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	host, port := c.ln.advertised()
	if c.ln.addr == nil {
		host, port = c.s.advertised()
	}
	lookup := func(key string) kmsg.FindCoordinatorResponseCoordinator {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key = key
		co.NodeID, co.Port = -1, -1
		var msg string
		// at answers with the coordinator the broker named: standalone,
		// this node; in a cluster, that broker's endpoint.
		at := func(id int32, err error) bool {
			if _, clustered := c.s.b.Cluster(); err == nil && !clustered {
				co.NodeID, co.Host, co.Port = c.s.opts.NodeID, host, port
				return true
			}
			if err == nil {
				brokers, _ := c.s.brokers(c.ln)
				err = spool.ErrCoordinatorNotAvailable
				for _, b := range brokers {
					if b.NodeID == id {
						co.NodeID, co.Host, co.Port, err = id, b.Host, b.Port, nil
					}
				}
			}
			if err != nil {
				co.ErrorCode, msg = errCoordinatorNotAvailable, err.Error()
			}
			return err == nil
		}
		switch {
		case body.CoordinatorType == coordinatorGroup && !c.can(acl.OpDescribe, acl.ResourceGroup, key):
			co.ErrorCode, msg = errGroupAuthorizationFailed, "Authorization failed."
		case body.CoordinatorType == coordinatorTransaction && !c.can(acl.OpDescribe, acl.ResourceTransactionalID, key):
			co.ErrorCode, msg = errTransactionalIDAuthorizationFailed, "Authorization failed."
		case body.CoordinatorType == coordinatorGroup:
			// The leader of the group's offsets partition.
			if at(c.s.b.GroupCoordinator(c.ctx, key)) {
				return co
			}
		case body.CoordinatorType == coordinatorTransaction:
			if key == "" {
				co.ErrorCode, msg = errInvalidRequest, "empty transactional id"
				break
			}
			// The leader of the id's __transaction_state partition,
			// created first if need be.
			if at(c.s.b.TransactionCoordinator(c.ctx, key)) {
				return co
			}
		case body.CoordinatorType == coordinatorShare && req.version >= 6:
			// Kafka answers so when share groups are not enabled.
			co.ErrorCode, msg = errCoordinatorNotAvailable, "share groups are not supported"
		default:
			co.ErrorCode, msg = errInvalidRequest, "unknown coordinator type"
		}
		co.ErrorMessage = &msg
		return co
	}
	if req.version >= 4 {
		for _, key := range body.CoordinatorKeys {
			resp.Coordinators = append(resp.Coordinators, lookup(key))
		}
		return resp, nil
	}
	co := lookup(body.CoordinatorKey)
	resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = co.ErrorCode, co.NodeID, co.Host, co.Port
	if req.version >= 1 {
		resp.ErrorMessage = co.ErrorMessage
	}
	return resp, nil
}
