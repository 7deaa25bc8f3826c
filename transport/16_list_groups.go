package transport

import (
	"strings"

	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListGroups v0-v5, served by the broker's group coordinator.
//
//   - v1 adds throttle time; v2 is the same; v3 is the first flexible
//     version.
//   - v4 filters by state and returns each group's state (KIP-518).
//   - v5 filters by type and returns each group's type (KIP-848):
//     "consumer" for a consumer group with members, else "classic".
//
// Filters match case-insensitively, as Kafka's do.
func init() { register(kmsg.ListGroups, 0, 5, listGroups) }

func listGroups(c *conn, req *request, body *kmsg.ListGroupsRequest) (kmsg.Response, error) {
	matches := func(filter []string, v string) bool {
		if len(filter) == 0 {
			return true
		}
		for _, f := range filter {
			if strings.EqualFold(f, v) {
				return true
			}
		}
		return false
	}
	resp := kmsg.NewPtrListGroupsResponse()
	// DESCRIBE on the cluster lists every group; without it, the groups
	// the principal may DESCRIBE.
	all := c.canCluster(acl.OpDescribe)
	for _, g := range c.s.b.Groups().List() {
		state := g.State.String()
		if !matches(body.StatesFilter, state) || !matches(body.TypesFilter, g.Type) {
			continue
		}
		if !all && !c.can(acl.OpDescribe, acl.ResourceGroup, g.Group) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group = g.Group
		rg.ProtocolType = g.ProtocolType
		rg.GroupState = state
		rg.GroupType = g.Type
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
