package transport

import (
	"errors"

	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups v0-v6, served by the broker's group coordinator. Member
// metadata and assignments are given while the group is Stable, as in Kafka.
//
//   - v1 adds throttle time; v2 is the same.
//   - v3 adds the group's authorized operations, on request (KIP-430).
//   - v4 adds the members' group.instance.id (KIP-345).
//   - v5 is the first flexible version.
//   - v6 answers an unknown group GROUP_ID_NOT_FOUND with a message
//     (KIP-1043); before, it is described as a Dead group without error.
func init() { register(kmsg.DescribeGroups, 0, 6, describeGroups) }

// groupOperations is the bitfield of ACL operations on a group (AclOperation
// codes READ 3, DELETE 6, DESCRIBE 8). With no authorizer every client may
// do them all, as in Kafka without one.
const groupOperations int32 = 1<<3 | 1<<6 | 1<<8

func describeGroups(c *conn, req *request, body *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	for _, id := range body.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		if body.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = 0
			for _, op := range []acl.Operation{acl.OpRead, acl.OpDelete, acl.OpDescribe} {
				if groupOperations&(1<<op) != 0 && c.can(op, acl.ResourceGroup, id) {
					rg.AuthorizedOperations |= 1 << op
				}
			}
		}
		if id == "" {
			rg.ErrorCode = errInvalidGroupID
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		if !c.can(acl.OpDescribe, acl.ResourceGroup, id) {
			rg.ErrorCode = errGroupAuthorizationFailed
			rg.AuthorizedOperations = -2147483648 // Kafka's "not asked" value
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		d, err := c.s.b.Groups().Describe(id)
		switch {
		case errors.Is(err, group.ErrGroupIDNotFound):
			rg.State = group.Dead.String()
			if req.version >= 6 {
				rg.ErrorCode = errGroupIDNotFound
				msg := "group " + id + " not found"
				rg.ErrorMessage = &msg
			}
		case err != nil:
			rg.ErrorCode = errorCode(err)
		default:
			rg.State = d.State.String()
			rg.ProtocolType = d.ProtocolType
			rg.Protocol = d.Protocol
			for _, m := range d.Members {
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID = m.MemberID
				rm.InstanceID = groupNullable(m.GroupInstanceID)
				rm.ClientID = m.ClientID
				rm.ClientHost = m.ClientHost
				rm.ProtocolMetadata = groupBytes(m.Metadata)
				rm.MemberAssignment = groupBytes(m.Assignment)
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// groupBytes keeps kmsg from writing null where the field is not nullable.
func groupBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
