package transport

import (
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Heartbeat v0-v4, served by the broker's group coordinator; it answers at
// once. REBALANCE_IN_PROGRESS tells the member to rejoin.
//
//   - v1 adds throttle time; v2 is the same.
//   - v3 adds group.instance.id (KIP-345).
//   - v4 is the first flexible version.
func init() { register(kmsg.Heartbeat, 0, 4, heartbeat) }

func heartbeat(c *conn, req *request, body *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	err := c.s.b.Groups().Heartbeat(group.HeartbeatRequest{
		Group:           body.Group,
		MemberID:        body.MemberID,
		GroupInstanceID: groupString(body.InstanceID),
		Generation:      body.Generation,
	})
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.ErrorCode = errorCode(err)
	return resp, nil
}
