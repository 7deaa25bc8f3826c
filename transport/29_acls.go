package transport

import (
	"errors"

	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v0-v3: the
// authorizer's bindings (Options.Authorizer). v0 knows only literal
// patterns; v1 adds the pattern type (KIP-290); v2 is flexible; v3 adds
// the USER resource type in filters. Without an authorizer each answers
// SECURITY_DISABLED, as Kafka does. Describe needs DESCRIBE on the
// cluster, Create and Delete ALTER (each binding or filter of a denied
// request answers CLUSTER_AUTHORIZATION_FAILED). An invalid binding
// or filter gets INVALID_REQUEST and is not applied; the others are.
func init() {
	register(kmsg.DescribeACLs, 0, 3, describeACLs)
	register(kmsg.CreateACLs, 0, 3, createACLs)
	register(kmsg.DeleteACLs, 0, 3, deleteACLs)
}

const errSecurityDisabled int16 = 54

func describeACLs(c *conn, req *request, body *kmsg.DescribeACLsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DescribeACLsResponse)
	a := c.s.opts.Authorizer
	if a == nil {
		resp.ErrorCode, resp.ErrorMessage = errSecurityDisabled, strPtr("no authorizer is configured (spool serve --authorizer)")
		return resp, nil
	}
	if !c.canCluster(acl.OpDescribe) {
		resp.ErrorCode = errClusterAuthorizationFailed
		return resp, nil
	}
	pattern := acl.PatternType(body.ResourcePatternType)
	if req.version == 0 {
		pattern = acl.PatternLiteral
	}
	f := acl.Filter{
		ResourceType: acl.ResourceType(body.ResourceType), Name: body.ResourceName, Pattern: pattern,
		Principal: body.Principal, Host: body.Host,
		Operation: acl.Operation(body.Operation), Permission: acl.Permission(body.PermissionType),
	}
	bs, err := a.Describe(f)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errInvalidRequest, strPtr(err.Error())
		return resp, nil
	}
	// Grouped by resource pattern, as Kafka answers; bs is sorted by it.
	for _, b := range bs {
		n := len(resp.Resources)
		if n == 0 || resp.Resources[n-1].ResourceType != kmsg.ACLResourceType(b.ResourceType) ||
			resp.Resources[n-1].ResourceName != b.Name || resp.Resources[n-1].ResourcePatternType != kmsg.ACLResourcePatternType(b.Pattern) {
			r := kmsg.NewDescribeACLsResponseResource()
			r.ResourceType, r.ResourceName, r.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.Name, kmsg.ACLResourcePatternType(b.Pattern)
			resp.Resources = append(resp.Resources, r)
			n++
		}
		e := kmsg.NewDescribeACLsResponseResourceACL()
		e.Principal, e.Host, e.Operation, e.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
		resp.Resources[n-1].ACLs = append(resp.Resources[n-1].ACLs, e)
	}
	return resp, nil
}

func createACLs(c *conn, req *request, body *kmsg.CreateACLsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.CreateACLsResponse)
	a := c.s.opts.Authorizer
	bs := make([]acl.Binding, len(body.Creations))
	for i, cr := range body.Creations {
		pattern := acl.PatternType(cr.ResourcePatternType)
		if req.version == 0 {
			pattern = acl.PatternLiteral
		}
		bs[i] = acl.Binding{
			ResourceType: acl.ResourceType(cr.ResourceType), Name: cr.ResourceName, Pattern: pattern,
			Principal: cr.Principal, Host: cr.Host,
			Operation: acl.Operation(cr.Operation), Permission: acl.Permission(cr.PermissionType),
		}
	}
	var errs []error
	allowed := c.canCluster(acl.OpAlter)
	if a != nil && allowed {
		c.s.settings.retryStale(c.ctx, a.Version, func() error {
			errs = a.Create(bs)
			return firstStale(errs)
		})
	}
	for i := range bs {
		r := kmsg.NewCreateACLsResponseResult()
		switch {
		case a == nil:
			r.ErrorCode, r.ErrorMessage = errSecurityDisabled, strPtr("no authorizer is configured (spool serve --authorizer)")
		case !allowed:
			r.ErrorCode = errClusterAuthorizationFailed
		case errors.Is(errs[i], acl.ErrInvalid):
			r.ErrorCode, r.ErrorMessage = errInvalidRequest, strPtr(errs[i].Error())
		case errs[i] != nil:
			r.ErrorCode, r.ErrorMessage = errorCode(errs[i]), strPtr(errs[i].Error())
			if r.ErrorCode == errUnknownServerError {
				r.ErrorCode = errKafkaStorageError
			}
		default:
			c.s.logger.Info("ACL created", "by", c.principal, "acl", bs[i].String())
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func deleteACLs(c *conn, req *request, body *kmsg.DeleteACLsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DeleteACLsResponse)
	a := c.s.opts.Authorizer
	fs := make([]acl.Filter, len(body.Filters))
	for i, f := range body.Filters {
		pattern := acl.PatternType(f.ResourcePatternType)
		if req.version == 0 {
			pattern = acl.PatternLiteral
		}
		fs[i] = acl.Filter{
			ResourceType: acl.ResourceType(f.ResourceType), Name: f.ResourceName, Pattern: pattern,
			Principal: f.Principal, Host: f.Host,
			Operation: acl.Operation(f.Operation), Permission: acl.Permission(f.PermissionType),
		}
	}
	var removed [][]acl.Binding
	var errs []error
	var saveErr error
	allowed := c.canCluster(acl.OpAlter)
	if a != nil && allowed {
		c.s.settings.retryStale(c.ctx, a.Version, func() error {
			removed, errs, saveErr = a.Delete(fs)
			return saveErr
		})
	}
	for i := range fs {
		r := kmsg.NewDeleteACLsResponseResult()
		switch {
		case a == nil:
			r.ErrorCode, r.ErrorMessage = errSecurityDisabled, strPtr("no authorizer is configured (spool serve --authorizer)")
		case !allowed:
			r.ErrorCode = errClusterAuthorizationFailed
		case errs[i] != nil:
			r.ErrorCode, r.ErrorMessage = errInvalidRequest, strPtr(errs[i].Error())
		case saveErr != nil:
			r.ErrorCode, r.ErrorMessage = errKafkaStorageError, strPtr(saveErr.Error())
		}
		if r.ErrorCode == errNone {
			for _, b := range removed[i] {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.Name, kmsg.ACLResourcePatternType(b.Pattern)
				m.Principal, m.Host, m.Operation, m.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
				r.MatchingACLs = append(r.MatchingACLs, m)
				c.s.logger.Info("ACL deleted", "by", c.principal, "acl", b.String())
			}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func strPtr(s string) *string { return &s }
