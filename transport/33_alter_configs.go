package transport

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/controller"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AlterConfigs v0-2 replaces a topic's settings whole: those the request
// does not name go back to their defaults (IncrementalAlterConfigs changes
// some and keeps the rest). The broker's settings are spool's Options, fixed
// when it starts: altering them is refused with INVALID_REQUEST, as Kafka
// refuses a setting that cannot change dynamically ("Cannot update these
// configs dynamically").
func init() { register(kmsg.AlterConfigs, 0, 2, alterConfigs) }

func alterConfigs(c *conn, req *request, body *kmsg.AlterConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrAlterConfigsResponse()
	dups := duplicateResources(len(body.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return body.Resources[i].ResourceType, body.Resources[i].ResourceName
	})
	for i, r := range body.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		var err error
		switch {
		case dups[i]:
			err = errDuplicateResource(r.ResourceType, r.ResourceName)
		case r.ResourceType == settingsResource && c.controller:
			err = c.alterSettings(r)
		case !c.canConfigs(acl.OpAlterConfigs, r.ResourceType, r.ResourceName):
			err = configsDenied(r.ResourceType)
		case r.ResourceType == kmsg.ConfigResourceTypeTopic:
			entries := make([]configEntry, len(r.Configs))
			for j, e := range r.Configs {
				entries[j] = configEntry{e.Name, e.Value}
			}
			err = c.alterTopic(r.ResourceName, body.ValidateOnly, func(_, def spool.TopicConfig) (spool.TopicConfig, error) {
				return topicConfigFrom(entries, def)
			})
		default:
			err = c.alterBroker(r.ResourceType, r.ResourceName, len(r.Configs))
		}
		rr.ErrorCode, rr.ErrorMessage = errorAndMessage(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// settingsResource is the resource type, private to spool, of an
// AlterConfigs request one node sends another's controller listener to
// replace a settings document of the cluster (spool.Remote's
// AlterSettings): the resource name is the document's kind, and entries
// carry the version the change was computed from, the new document and
// the change's id. Kafka's types stop at 8; a client's request of this
// type on a client listener is refused as any unknown type is.
const settingsResource kmsg.ConfigResourceType = 127

const (
	settingsBaseVersion = "spool.settings.base.version"
	settingsData        = "spool.settings.data"
	settingsID          = "spool.settings.id"
)

// alterSettings serves settingsResource: another node asks this one's
// active controller to replace a settings document.
func (c *conn) alterSettings(r kmsg.AlterConfigsRequestResource) error {
	if !c.canCluster(acl.OpClusterAction) {
		return &apiError{errClusterAuthorizationFailed, ""}
	}
	ch := controller.SettingsChange{Kind: controller.SettingsKind(r.ResourceName)}
	var haveBase, haveData bool
	for _, e := range r.Configs {
		switch {
		case e.Value == nil:
		case e.Name == settingsBaseVersion:
			v, err := strconv.ParseInt(*e.Value, 10, 64)
			if err != nil {
				return &apiError{errInvalidRequest, "bad " + settingsBaseVersion}
			}
			ch.BaseVersion, haveBase = v, true
		case e.Name == settingsData:
			ch.Data, haveData = json.RawMessage(*e.Value), true
		case e.Name == settingsID:
			ch.ID = *e.Value
		}
	}
	if !haveBase || !haveData {
		return &apiError{errInvalidRequest, "a settings change needs " + settingsBaseVersion + " and " + settingsData}
	}
	return c.s.b.AlterSettings(c.ctx, ch)
}

// alterTopic changes a topic's own settings to what change makes of them
// (def: the topic's defaults), or, validating only, checks the result.
func (c *conn) alterTopic(name string, validateOnly bool, change func(own, def spool.TopicConfig) (spool.TopicConfig, error)) error {
	if err := spool.ValidTopicName(name); err != nil {
		return err
	}
	b := c.s.b
	def := b.TopicDefaults()
	if validateOnly {
		own, _, err := b.TopicSettings(name)
		if err != nil {
			return err
		}
		if own, err = change(own, def); err != nil {
			return err
		}
		return b.CheckTopicConfig(own)
	}
	return b.AlterTopicConfig(c.ctx, name, func(own spool.TopicConfig) (spool.TopicConfig, error) {
		return change(own, def)
	})
}

// alterBroker refuses to change broker settings (nothing to change is
// fine).
func (c *conn) alterBroker(typ kmsg.ConfigResourceType, name string, changes int) error {
	if typ != kmsg.ConfigResourceTypeBroker {
		return &apiError{errInvalidRequest, fmt.Sprintf("Unsupported resource type %v", typ)}
	}
	if err := c.s.checkBrokerResource(name); err != nil {
		return err
	}
	if changes == 0 {
		return nil
	}
	return &apiError{errInvalidRequest, "Cannot update broker configs dynamically: spool's broker settings are its Options, fixed when it starts"}
}

// duplicateResources marks the resources named more than once in a
// request; Kafka refuses each of them.
func duplicateResources(n int, at func(int) (kmsg.ConfigResourceType, string)) []bool {
	type key struct {
		typ  kmsg.ConfigResourceType
		name string
	}
	count := map[key]int{}
	for i := 0; i < n; i++ {
		t, name := at(i)
		count[key{t, name}]++
	}
	dups := make([]bool, n)
	for i := range dups {
		t, name := at(i)
		dups[i] = count[key{t, name}] > 1
	}
	return dups
}

func errDuplicateResource(typ kmsg.ConfigResourceType, name string) error {
	return &apiError{errInvalidRequest, fmt.Sprintf("Duplicate resource %v %q in the request", typ, name)}
}

// errorAndMessage is the code and message of an error (none for nil).
func errorAndMessage(err error) (int16, *string) {
	if err == nil {
		return errNone, nil
	}
	msg := err.Error()
	return apiErrorCode(err), &msg
}
