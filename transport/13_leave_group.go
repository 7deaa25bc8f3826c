package transport

import (
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LeaveGroup v0-v5, served by the broker's group coordinator; it answers at
// once and the group rebalances without the members that left.
//
//   - v1 adds throttle time; v2 is the same.
//   - v3 leaves a batch of members, named by member id and/or
//     group.instance.id, with an error per member (KIP-345).
//   - v4 is the first flexible version.
//   - v5 adds a reason per member, which is only logged (KIP-800).
func init() { register(kmsg.LeaveGroup, 0, 5, leaveGroup) }

func leaveGroup(c *conn, req *request, body *kmsg.LeaveGroupRequest) (kmsg.Response, error) {
	lr := group.LeaveRequest{Group: body.Group}
	if req.version < 3 {
		lr.Members = []group.LeaveMember{{MemberID: body.MemberID}}
	} else {
		for _, m := range body.Members {
			lr.Members = append(lr.Members, group.LeaveMember{MemberID: m.MemberID, GroupInstanceID: groupString(m.InstanceID)})
			if m.Reason != nil {
				c.s.logger.Debug("leave group", "group", body.Group, "member", m.MemberID, "reason", *m.Reason)
			}
		}
	}
	errs, err := c.s.b.Groups().Leave(lr)
	resp := kmsg.NewPtrLeaveGroupResponse()
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	if req.version < 3 {
		// One member: its error is the response's.
		if len(errs) == 1 {
			resp.ErrorCode = errorCode(errs[0])
		}
		return resp, nil
	}
	for i, m := range lr.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID = m.MemberID
		rm.InstanceID = body.Members[i].InstanceID
		if i < len(errs) {
			rm.ErrorCode = errorCode(errs[i])
		}
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
