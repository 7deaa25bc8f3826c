package transport

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/quota"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client quotas (Options.Quotas; package quota). Each request is counted
// for the connection's user (its principal's name: "alice" for
// User:alice, ANONYMOUS without authentication) and the request's client
// id:
//
//   - producer_byte_rate: a Produce request's bytes, once it is served
//     (the records are appended either way);
//   - consumer_byte_rate: a Fetch response's record bytes, before it is
//     sent; one that would take the consumer over its quota is answered
//     empty instead, and not counted;
//   - request_percentage: the time spent serving each request (not a
//     Fetch's wait for data), as a share of one handler.
//
// A client over a quota is told to wait (the response's throttle_time_ms)
// and its connection is muted - nothing more is read from it - for that
// long (KIP-219): clients that ignore the field are slowed as well.
// Connections on a cluster node's controller listener are not counted.

// quotaUser is the user part of the connection's quota entity.
func (c *conn) quotaUser() string { return strings.TrimPrefix(c.principal, "User:") }

// applyQuotas counts a served request against the client's quotas, sets
// the throttle in its response (nil for an acks=0 produce) and mutes the
// connection for it.
func (c *conn) applyQuotas(req *request, start time.Time, resp kmsg.Response) {
	q := c.s.opts.Quotas
	if q == nil || c.controller {
		return
	}
	user := c.quotaUser()
	wait := q.Record(quota.RequestPercentage, user, req.clientID, time.Since(start).Seconds()*100)
	if req.key == kmsg.Produce.Int16() {
		wait = max(wait, q.Record(quota.ProducerByteRate, user, req.clientID, float64(req.size)))
	}
	c.throttle(wait, resp)
}

// chargeRequestTime counts d of serving a request that applyQuotas does
// not see (Fetch, which writes its own response) against request_percentage.
func (c *conn) chargeRequestTime(req *request, d time.Duration, resp kmsg.Response) {
	q := c.s.opts.Quotas
	if q == nil || c.controller {
		return
	}
	c.throttle(q.Record(quota.RequestPercentage, c.quotaUser(), req.clientID, max(d, 0).Seconds()*100), resp)
}

// errThrottlingQuotaExceeded: a topic mutation refused under
// controller_mutation_rate (KIP-599).
const errThrottlingQuotaExceeded int16 = 89

// mutationQuota counts n partition mutations (created or deleted) of one
// topic against controller_mutation_rate, and sets the response's
// throttle. strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics
// v5+, whose clients know THROTTLING_QUOTA_EXCEEDED) refuses the topic
// while the client is over its quota already, as Kafka does; older
// versions are served and throttled.
func (c *conn) mutationQuota(req *request, n int, strict bool, resp kmsg.Response) error {
	q := c.s.opts.Quotas
	if q == nil || c.controller || n <= 0 {
		return nil
	}
	user := c.quotaUser()
	if !strict {
		c.throttle(q.Record(quota.ControllerMutationRate, user, req.clientID, float64(n)), resp)
		return nil
	}
	wait, send := q.Check(quota.ControllerMutationRate, user, req.clientID, float64(n))
	c.throttle(wait, resp)
	if !send {
		return &apiError{errThrottlingQuotaExceeded, fmt.Sprintf("The controller mutation quota is exceeded; retry after %v.", wait.Round(time.Millisecond))}
	}
	return nil
}

// throttle tells the client to wait and mutes the connection that long.
func (c *conn) throttle(wait time.Duration, resp kmsg.Response) {
	if wait <= 0 {
		return
	}
	if tr, ok := resp.(kmsg.SetThrottleResponse); ok && resp != nil {
		ms := int32(min(wait.Milliseconds(), 1<<31-1))
		if cur, ok := resp.(kmsg.ThrottleResponse); ok {
			if was, _ := cur.Throttle(); was > ms {
				ms = was // several quotas: the longest wait
			}
		}
		tr.SetThrottle(ms)
	}
	if until := time.Now().Add(wait); until.After(c.throttledUntil) {
		c.throttledUntil = until
	}
}

// fetchQuota decides a consumer's Fetch of n record bytes: how long the
// client is to wait after it, and whether it goes out (false: empty, the
// consumer being over its quota already).
func (c *conn) fetchQuota(req *request, n int64) (time.Duration, bool) {
	q := c.s.opts.Quotas
	if q == nil || c.controller || n == 0 {
		return 0, true
	}
	return q.Check(quota.ConsumerByteRate, c.quotaUser(), req.clientID, float64(n))
}

// DescribeClientQuotas (48) and AlterClientQuotas (49), v0-v1 (KIP-546):
// the quotas of user and client-id entities. ip entities (connection
// creation rate) are not supported (UNSUPPORTED_VERSION for a filter on
// them, INVALID_REQUEST to set one). Describe needs DESCRIBE_CONFIGS on
// the cluster, Alter ALTER_CONFIGS. Without Options.Quotas both answer
// UNSUPPORTED_VERSION with the reason.
func init() {
	register(kmsg.DescribeClientQuotas, 0, 1, describeClientQuotas)
	register(kmsg.AlterClientQuotas, 0, 1, alterClientQuotas)
}

const (
	entityUser     = "user"
	entityClientID = "client-id"
	entityIP       = "ip"
)

func describeClientQuotas(c *conn, req *request, body *kmsg.DescribeClientQuotasRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	q := c.s.opts.Quotas
	fail := func(code int16, msg string) (kmsg.Response, error) {
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		return resp, nil
	}
	switch {
	case q == nil:
		return fail(errUnsupportedVersion, "client quotas are not enabled on this broker")
	case !c.canCluster(acl.OpDescribeConfigs):
		return fail(errClusterAuthorizationFailed, "Authorization failed.")
	}
	type filter struct {
		matchType kmsg.QuotasMatchType
		match     *string
	}
	var user, client *filter
	for _, comp := range body.Components {
		f := &filter{comp.MatchType, comp.Match}
		switch {
		case comp.MatchType == 0 && comp.Match == nil:
			return fail(errInvalidRequest, "an exact match needs a name")
		case comp.MatchType > 2:
			return fail(errInvalidRequest, "unknown match type")
		}
		switch comp.EntityType {
		case entityUser:
			if user != nil {
				return fail(errInvalidRequest, "user filtered twice")
			}
			user = f
		case entityClientID:
			if client != nil {
				return fail(errInvalidRequest, "client-id filtered twice")
			}
			client = f
		case entityIP:
			return fail(errUnsupportedVersion, "ip quotas are not supported")
		default:
			return fail(errUnsupportedVersion, "unknown entity type "+comp.EntityType)
		}
	}
	matches := func(f *filter, has, def bool, name string) bool {
		if f == nil {
			return true
		}
		if !has {
			return false
		}
		switch f.matchType {
		case 0:
			return !def && name == *f.match
		case 1:
			return def
		}
		return !def // 2: any named one
	}
	qs := q.Quotas()
	for _, e := range quota.Sorted(qs) {
		if !matches(user, e.HasUser, e.UserDefault, e.User) || !matches(client, e.HasClient, e.ClientDefault, e.ClientID) {
			continue
		}
		if body.Strict && ((user == nil) == e.HasUser || (client == nil) == e.HasClient) {
			continue // strict: exactly the filtered types
		}
		entry := kmsg.NewDescribeClientQuotasResponseEntry()
		if e.HasUser {
			entry.Entity = append(entry.Entity, kmsg.DescribeClientQuotasResponseEntryEntity{Type: entityUser, Name: entityName(e.UserDefault, e.User)})
		}
		if e.HasClient {
			entry.Entity = append(entry.Entity, kmsg.DescribeClientQuotasResponseEntryEntity{Type: entityClientID, Name: entityName(e.ClientDefault, e.ClientID)})
		}
		for _, k := range quota.Keys {
			if v, ok := qs[e][k]; ok {
				entry.Values = append(entry.Values, kmsg.DescribeClientQuotasResponseEntryValue{Key: string(k), Value: v})
			}
		}
		resp.Entries = append(resp.Entries, entry)
	}
	return resp, nil
}

func entityName(def bool, name string) *string {
	if def {
		return nil
	}
	return &name
}

func alterClientQuotas(c *conn, req *request, body *kmsg.AlterClientQuotasRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	q := c.s.opts.Quotas
	allowed := c.canCluster(acl.OpAlterConfigs)
	entities := make([]quota.Entity, len(body.Entries))
	ops := make([][]quota.Op, len(body.Entries))
	bad := make([]error, len(body.Entries))
	for i, en := range body.Entries {
		for _, ent := range en.Entity {
			switch ent.Type {
			case entityUser:
				if entities[i].HasUser {
					bad[i] = errors.New("user given twice")
				}
				entities[i].HasUser, entities[i].UserDefault = true, ent.Name == nil
				if ent.Name != nil {
					entities[i].User = *ent.Name
				}
			case entityClientID:
				if entities[i].HasClient {
					bad[i] = errors.New("client-id given twice")
				}
				entities[i].HasClient, entities[i].ClientDefault = true, ent.Name == nil
				if ent.Name != nil {
					entities[i].ClientID = *ent.Name
				}
			default:
				bad[i] = errors.New("entity type " + ent.Type + " is not supported (user and client-id are)")
			}
		}
		for _, op := range en.Ops {
			ops[i] = append(ops[i], quota.Op{Key: quota.Key(op.Key), Value: op.Value, Remove: op.Remove})
		}
	}
	var errs []error
	if q != nil && allowed {
		// Entities refused above are passed empty, so that they fail
		// validation and change nothing.
		valid := make([]quota.Entity, len(entities))
		for i := range entities {
			if bad[i] == nil {
				valid[i] = entities[i]
			}
		}
		c.s.settings.retryStale(c.ctx, q.Version, func() error {
			errs = q.Alter(valid, ops, body.ValidateOnly)
			return firstStale(errs)
		})
	}
	for i, en := range body.Entries {
		re := kmsg.NewAlterClientQuotasResponseEntry()
		for _, ent := range en.Entity {
			re.Entity = append(re.Entity, kmsg.AlterClientQuotasResponseEntryEntity{Type: ent.Type, Name: ent.Name})
		}
		var msg string
		switch {
		case q == nil:
			re.ErrorCode, msg = errUnsupportedVersion, "client quotas are not enabled on this broker"
		case !allowed:
			re.ErrorCode, msg = errClusterAuthorizationFailed, "Authorization failed."
		case bad[i] != nil:
			re.ErrorCode, msg = errInvalidRequest, bad[i].Error()
		case errors.Is(errs[i], quota.ErrInvalid):
			re.ErrorCode, msg = errInvalidRequest, errs[i].Error()
		case errs[i] != nil:
			re.ErrorCode, msg = errKafkaStorageError, errs[i].Error()
		default:
			if !body.ValidateOnly {
				c.s.logger.Info("client quotas changed", "by", c.principal, "entity", entities[i].String())
			}
		}
		if msg != "" {
			re.ErrorMessage = &msg
		}
		resp.Entries = append(resp.Entries, re)
	}
	return resp, nil
}
