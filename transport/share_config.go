package transport

import (
	"github.com/spoolmq/spool"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group configs (KIP-848, KIP-932: config resource type GROUP) that spool
// keeps: share.auto.offset.reset, where a share group starts in a
// partition it never consumed. DescribeConfigs shows it;
// IncrementalAlterConfigs SETs or DELETEs it (back to "latest"). Other
// group configs are INVALID_CONFIG.

// groupConfigViews shows a share group's configs.
func (c *conn) groupConfigViews(group string) []configView {
	cfg := c.s.b.ShareGroupConfig(group)
	source := kmsg.ConfigSourceGroupConfig
	if cfg.AutoOffsetReset == "latest" {
		source = kmsg.ConfigSourceDefaultConfig
	}
	return []configView{{name: shareAutoOffsetReset, value: cfg.AutoOffsetReset, source: source, typ: kmsg.ConfigTypeString,
		doc: "Where a share group starts in a partition it has not consumed: latest or earliest."}}
}

// alterGroupConfig applies IncrementalAlterConfigs operations to a
// group's configs.
func (c *conn) alterGroupConfig(group string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) error {
	if group == "" {
		return &apiError{errInvalidRequest, "Group name must not be empty"}
	}
	cfg := c.s.b.ShareGroupConfig(group)
	for _, op := range ops {
		if op.Name != shareAutoOffsetReset {
			return invalidConfig("Unknown group config name: %s", op.Name)
		}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if op.Value == nil || *op.Value != "latest" && *op.Value != "earliest" {
				v := "null"
				if op.Value != nil {
					v = *op.Value
				}
				return invalidValue(op.Name, v, "must be latest or earliest")
			}
			cfg.AutoOffsetReset = *op.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			cfg.AutoOffsetReset = "latest"
		default:
			return invalidConfig("Config value append/subtract is not allowed for config key: %s", op.Name)
		}
	}
	if validateOnly {
		return nil
	}
	ctx, stop := c.shareWaitContext()
	defer stop()
	return c.s.b.SetShareGroupConfig(ctx, group, spool.ShareGroupConfig{AutoOffsetReset: cfg.AutoOffsetReset})
}
