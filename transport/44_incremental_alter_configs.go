package transport

import (
	"fmt"
	"strings"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// IncrementalAlterConfigs v0-1 (KIP-339) changes some of a topic's
// settings: SET one, DELETE one (back to its default), APPEND to or
// SUBTRACT from a list (cleanup.policy only). Each resource succeeds or
// fails whole. Broker settings are refused as in AlterConfigs.
func init() { register(kmsg.IncrementalAlterConfigs, 0, 1, incrementalAlterConfigs) }

func incrementalAlterConfigs(c *conn, req *request, body *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	dups := duplicateResources(len(body.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return body.Resources[i].ResourceType, body.Resources[i].ResourceName
	})
	for i, r := range body.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		var err error
		switch {
		case dups[i]:
			err = errDuplicateResource(r.ResourceType, r.ResourceName)
		case !c.canConfigs(acl.OpAlterConfigs, r.ResourceType, r.ResourceName):
			err = configsDenied(r.ResourceType)
		case r.ResourceType == kmsg.ConfigResourceTypeTopic:
			if err = checkIncrementalOps(r.Configs); err == nil {
				ops := r.Configs
				err = c.alterTopic(r.ResourceName, body.ValidateOnly, func(own, def spool.TopicConfig) (spool.TopicConfig, error) {
					return applyIncrementalOps(own, def, ops)
				})
			}
		case r.ResourceType == kmsg.ConfigResourceTypeGroupConfig:
			err = c.alterGroupConfig(r.ResourceName, r.Configs, body.ValidateOnly)
		default:
			err = c.alterBroker(r.ResourceType, r.ResourceName, len(r.Configs))
		}
		rr.ErrorCode, rr.ErrorMessage = errorAndMessage(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// checkIncrementalOps refuses what no topic accepts, before the topic is
// touched: duplicate or unknown settings, unknown operations, null values,
// list operations on a setting that is not a list.
func checkIncrementalOps(ops []kmsg.IncrementalAlterConfigsRequestResourceConfig) error {
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.Name] {
			return &apiError{errInvalidRequest, "Error due to duplicate config keys: " + op.Name}
		}
		seen[op.Name] = true
		k, ok := topicKeyNamed(op.Name)
		if !ok {
			return invalidConfig("Unknown topic config name: %s", op.Name)
		}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete:
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			if k.alterList == nil {
				return invalidConfig("Config value %s is not allowed for config key: %s (not a list)", strings.ToLower(op.Op.String()), op.Name)
			}
		default:
			return &apiError{errInvalidRequest, fmt.Sprintf("Unknown alter config operation %d for %s", op.Op, op.Name)}
		}
		if op.Value == nil && op.Op != kmsg.IncrementalAlterConfigOpDelete {
			return &apiError{errInvalidRequest, "Null value not supported for : " + op.Name}
		}
	}
	return nil
}

func applyIncrementalOps(own, def spool.TopicConfig, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig) (spool.TopicConfig, error) {
	for _, op := range ops {
		k, _ := topicKeyNamed(op.Name)
		var err error
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			err = k.set(&own, *op.Value, def)
		case kmsg.IncrementalAlterConfigOpDelete:
			k.clear(&own)
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			err = k.alterList(&own, *op.Value, def, op.Op == kmsg.IncrementalAlterConfigOpAppend)
		}
		if err != nil {
			return own, err
		}
	}
	return own, nil
}

// alterPolicy adds to or removes from the topic's cleanup.policy (its
// default when it sets none).
func alterPolicy(c *spool.TopicConfig, v string, def spool.TopicConfig, add bool) error {
	cur := c.CleanupPolicy
	if cur == "" {
		cur = def.CleanupPolicy
	}
	del, compact, err := policyElements(string(cur))
	if err != nil {
		return err
	}
	d, k, err := policyElements(v)
	if err != nil {
		return err
	}
	if add {
		del, compact = del || d, compact || k
	} else {
		del, compact = del && !d, compact && !k
	}
	p, err := policyOf(del, compact, v)
	if err != nil {
		return err
	}
	c.CleanupPolicy = p
	return nil
}
