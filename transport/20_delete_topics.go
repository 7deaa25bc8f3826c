package transport

import (
	"fmt"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteTopics v0-6: by name, and from v6 by name or topic ID. A topic
// named twice is INVALID_REQUEST, as is deleting __consumer_offsets (the
// group coordinator's store). v5 adds error messages. Deletion is
// synchronous: the timeout is not needed.
func init() { register(kmsg.DeleteTopics, 0, 6, deleteTopics) }

func deleteTopics(c *conn, req *request, body *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDeleteTopicsResponse()
	topics := body.Topics
	if req.version < 6 {
		topics = make([]kmsg.DeleteTopicsRequestTopic, len(body.TopicNames))
		for i := range body.TopicNames {
			topics[i].Topic = &body.TopicNames[i]
		}
	}
	// Resolve IDs to names first, so that duplicates are found either way.
	names := make([]string, len(topics))
	errs := make([]error, len(topics))
	count := map[string]int{}
	for i, t := range topics {
		switch {
		case t.Topic != nil && t.TopicID != [16]byte{}:
			errs[i] = &apiError{errInvalidRequest, "Topic name and topic ID cannot both be set"}
		case t.Topic != nil:
			names[i] = *t.Topic
		case t.TopicID == [16]byte{}:
			errs[i] = &apiError{errInvalidRequest, "Neither topic name nor topic ID is set"}
		default:
			d, ok := c.s.topicByID(t.TopicID)
			if !ok {
				errs[i] = &apiError{errUnknownTopicID, fmt.Sprintf("Topic ID %s does not exist", spool.TopicID(t.TopicID))}
				continue
			}
			names[i] = d.Name
		}
		if errs[i] == nil {
			count[names[i]]++
		}
	}
	for i, t := range topics {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.TopicID = t.TopicID
		err := errs[i]
		if err == nil {
			name := names[i]
			if t.Topic != nil || c.can(acl.OpDescribe, acl.ResourceTopic, name) {
				rt.Topic = &name // by id: named only to who may describe it
			}
			if !c.can(acl.OpDelete, acl.ResourceTopic, name) {
				err = &apiError{errTopicAuthorizationFailed, "Authorization failed."}
			} else if d, derr := c.s.b.DescribeTopic(name); derr == nil && count[name] == 1 && !d.Internal {
				if err = c.mutationQuota(req, len(d.Partitions), req.version >= 5, resp); err == nil {
					err = c.deleteTopic(name, false, &rt)
				}
			} else {
				err = c.deleteTopic(name, count[name] > 1, &rt)
			}
		}
		rt.ErrorCode, rt.ErrorMessage = errorAndMessage(err)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (c *conn) deleteTopic(name string, dup bool, rt *kmsg.DeleteTopicsResponseTopic) error {
	if dup {
		return &apiError{errInvalidRequest, "Duplicate topic in request: " + name}
	}
	d, err := c.s.b.DescribeTopic(name)
	if err != nil {
		return err
	}
	rt.TopicID = d.ID
	if d.Internal {
		return &apiError{errInvalidRequest, "Internal topic " + name + " cannot be deleted"}
	}
	return c.s.b.DeleteTopic(c.ctx, name)
}
