package transport

import (
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteGroups v0-v3, served by the broker's group coordinator: a group
// without members is deleted with its committed offsets; others get
// NON_EMPTY_GROUP, unknown ones GROUP_ID_NOT_FOUND.
//
//   - v1 is v0; v2 is the first flexible version.
//   - v3 adds an error message per group.
func init() { register(kmsg.DeleteGroups, 0, 3, deleteGroups) }

func deleteGroups(c *conn, req *request, body *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	seen := make(map[string]bool, len(body.Groups))
	for _, id := range body.Groups {
		if seen[id] {
			continue // one answer per group
		}
		seen[id] = true
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		if id == "" {
			rg.ErrorCode = errInvalidGroupID
		} else if !c.can(acl.OpDelete, acl.ResourceGroup, id) {
			rg.ErrorCode = errGroupAuthorizationFailed
		} else if err := c.s.b.Groups().Delete(id)[id]; err != nil {
			rg.ErrorCode = errorCode(err)
			if req.version >= 3 {
				msg := err.Error()
				rg.ErrorMessage = &msg
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
