// Package acl is Kafka's access control model: ACL bindings, the filters
// CreateAcls, DescribeAcls and DeleteAcls use, and an Authorizer that
// decides each request's operations as Kafka's StandardAuthorizer does,
// keeping its bindings in a Store: a file in a standalone broker's data
// directory (FileStore), or a cluster's metadata log, shared by the nodes'
// Authorizers (a VersionedStore; package transport's).
//
// A binding is a resource pattern and an access control entry:
//
//	resource type  TOPIC, GROUP, CLUSTER ("kafka-cluster"), TRANSACTIONAL_ID, ...
//	name           a resource name, "*" for every one of the type (LITERAL),
//	               or a prefix (PREFIXED)
//	principal      "User:alice", or "User:*" for everyone
//	host           the client's IP address, or "*"
//	operation      READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ... or ALL
//	permission     ALLOW or DENY
//
// A request's operation on a resource is allowed when the principal is a
// super user, or some ALLOW binding applies and no DENY binding does (deny
// wins). ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and ALLOW
// of ALTER_CONFIGS implies DESCRIBE_CONFIGS; a DENY implies nothing.
// Without any binding that applies, the operation is denied (Kafka's
// allow.everyone.if.no.acl.found=false).
package acl

import (
	"errors"
	"fmt"
	"strings"
)

// ResourceType is a kind of resource (Kafka's codes).
type ResourceType int8

// Resource types.
const (
	ResourceUnknown         ResourceType = 0
	ResourceAny             ResourceType = 1 // filters only
	ResourceTopic           ResourceType = 2
	ResourceGroup           ResourceType = 3
	ResourceCluster         ResourceType = 4
	ResourceTransactionalID ResourceType = 5
	ResourceDelegationToken ResourceType = 6
	ResourceUser            ResourceType = 7
)

var resourceNames = map[ResourceType]string{
	ResourceAny: "ANY", ResourceTopic: "TOPIC", ResourceGroup: "GROUP", ResourceCluster: "CLUSTER",
	ResourceTransactionalID: "TRANSACTIONAL_ID", ResourceDelegationToken: "DELEGATION_TOKEN", ResourceUser: "USER",
}

func (t ResourceType) String() string {
	if n, ok := resourceNames[t]; ok {
		return n
	}
	return "UNKNOWN"
}

// Operation is what a request does to a resource (Kafka's codes).
type Operation int8

// Operations.
const (
	OpUnknown         Operation = 0
	OpAny             Operation = 1 // filters only
	OpAll             Operation = 2
	OpRead            Operation = 3
	OpWrite           Operation = 4
	OpCreate          Operation = 5
	OpDelete          Operation = 6
	OpAlter           Operation = 7
	OpDescribe        Operation = 8
	OpClusterAction   Operation = 9
	OpDescribeConfigs Operation = 10
	OpAlterConfigs    Operation = 11
	OpIdempotentWrite Operation = 12
	OpCreateTokens    Operation = 13
	OpDescribeTokens  Operation = 14
)

var opNames = map[Operation]string{
	OpAny: "ANY", OpAll: "ALL", OpRead: "READ", OpWrite: "WRITE", OpCreate: "CREATE", OpDelete: "DELETE",
	OpAlter: "ALTER", OpDescribe: "DESCRIBE", OpClusterAction: "CLUSTER_ACTION", OpDescribeConfigs: "DESCRIBE_CONFIGS",
	OpAlterConfigs: "ALTER_CONFIGS", OpIdempotentWrite: "IDEMPOTENT_WRITE", OpCreateTokens: "CREATE_TOKENS",
	OpDescribeTokens: "DESCRIBE_TOKENS",
}

func (o Operation) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return "UNKNOWN"
}

// Permission is ALLOW or DENY (Kafka's codes).
type Permission int8

// Permissions.
const (
	PermissionUnknown Permission = 0
	PermissionAny     Permission = 1 // filters only
	Deny              Permission = 2
	Allow             Permission = 3
)

func (p Permission) String() string {
	switch p {
	case PermissionAny:
		return "ANY"
	case Deny:
		return "DENY"
	case Allow:
		return "ALLOW"
	}
	return "UNKNOWN"
}

// PatternType is how a binding's name matches resource names (Kafka's
// codes, KIP-290).
type PatternType int8

// Pattern types.
const (
	PatternUnknown  PatternType = 0
	PatternAny      PatternType = 1 // filters: any stored pattern with the filter's name
	PatternMatch    PatternType = 2 // filters: every binding that applies to the filter's name
	PatternLiteral  PatternType = 3 // the name itself, or "*" for all
	PatternPrefixed PatternType = 4 // every name starting with it
)

func (p PatternType) String() string {
	switch p {
	case PatternAny:
		return "ANY"
	case PatternMatch:
		return "MATCH"
	case PatternLiteral:
		return "LITERAL"
	case PatternPrefixed:
		return "PREFIXED"
	}
	return "UNKNOWN"
}

// ClusterName is the name of the one CLUSTER resource.
const ClusterName = "kafka-cluster"

// Wildcard is the literal name, principal and host that match all.
const Wildcard = "*"

// Binding is one ACL: a resource pattern and an access control entry.
type Binding struct {
	ResourceType ResourceType
	Name         string
	Pattern      PatternType
	Principal    string // "User:name" or "User:*"
	Host         string // an IP address or "*"
	Operation    Operation
	Permission   Permission
}

func (b Binding) String() string {
	return fmt.Sprintf("%v %s:%s %v %v %s from %s", b.Permission, b.ResourceType, b.Name, b.Pattern, b.Operation, b.Principal, b.Host)
}

// ErrInvalid means a binding or filter Kafka would refuse (INVALID_REQUEST).
var ErrInvalid = errors.New("acl: invalid binding or filter")

// Validate checks a binding to be created as Kafka's CreateAcls does.
func (b Binding) Validate() error {
	switch {
	case b.ResourceType <= ResourceAny || b.ResourceType > ResourceUser:
		return fmt.Errorf("%w: resource type %v", ErrInvalid, b.ResourceType)
	case b.Pattern != PatternLiteral && b.Pattern != PatternPrefixed:
		return fmt.Errorf("%w: pattern type %v (LITERAL or PREFIXED)", ErrInvalid, b.Pattern)
	case b.Operation <= OpAny || b.Operation > OpDescribeTokens:
		return fmt.Errorf("%w: operation %v", ErrInvalid, b.Operation)
	case b.Permission != Allow && b.Permission != Deny:
		return fmt.Errorf("%w: permission %v", ErrInvalid, b.Permission)
	case b.Name == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalid)
	case b.ResourceType == ResourceCluster && b.Name != ClusterName:
		return fmt.Errorf("%w: the cluster resource is named %q, not %q", ErrInvalid, ClusterName, b.Name)
	case !validPrincipal(b.Principal):
		return fmt.Errorf("%w: principal %q (want Type:name, e.g. User:alice)", ErrInvalid, b.Principal)
	case b.Host == "":
		return fmt.Errorf("%w: empty host (an IP address, or *)", ErrInvalid)
	}
	return nil
}

func validPrincipal(p string) bool {
	typ, name, ok := strings.Cut(p, ":")
	return ok && typ != "" && name != ""
}

// Filter selects bindings (DescribeAcls, DeleteAcls). A nil Name,
// Principal or Host matches any; ResourceAny, OpAny, PermissionAny and
// PatternAny match any; PatternMatch selects the bindings that apply to
// the resource Name (literal equal, literal "*", prefixes of it).
type Filter struct {
	ResourceType ResourceType
	Name         *string
	Pattern      PatternType
	Principal    *string
	Host         *string
	Operation    Operation
	Permission   Permission
}

// Validate refuses filters with UNKNOWN fields.
func (f Filter) Validate() error {
	switch {
	case f.ResourceType <= ResourceUnknown || f.ResourceType > ResourceUser:
		return fmt.Errorf("%w: filter resource type %v", ErrInvalid, f.ResourceType)
	case f.Pattern <= PatternUnknown || f.Pattern > PatternPrefixed:
		return fmt.Errorf("%w: filter pattern type %v", ErrInvalid, f.Pattern)
	case f.Operation <= OpUnknown || f.Operation > OpDescribeTokens:
		return fmt.Errorf("%w: filter operation %v", ErrInvalid, f.Operation)
	case f.Permission <= PermissionUnknown || f.Permission > Allow:
		return fmt.Errorf("%w: filter permission %v", ErrInvalid, f.Permission)
	case f.Pattern == PatternMatch && f.Name == nil:
		return fmt.Errorf("%w: a MATCH filter needs a resource name", ErrInvalid)
	}
	return nil
}

// Matches reports whether the filter selects b.
func (f Filter) Matches(b Binding) bool {
	if f.ResourceType != ResourceAny && f.ResourceType != b.ResourceType {
		return false
	}
	if f.Principal != nil && *f.Principal != b.Principal {
		return false
	}
	if f.Host != nil && *f.Host != b.Host {
		return false
	}
	if f.Operation != OpAny && f.Operation != b.Operation {
		return false
	}
	if f.Permission != PermissionAny && f.Permission != b.Permission {
		return false
	}
	switch f.Pattern {
	case PatternAny:
		return f.Name == nil || *f.Name == b.Name
	case PatternMatch:
		return appliesTo(b, *f.Name)
	case PatternLiteral, PatternPrefixed:
		return f.Pattern == b.Pattern && (f.Name == nil || *f.Name == b.Name)
	}
	return false
}

// appliesTo reports whether b's pattern covers the resource name.
func appliesTo(b Binding, name string) bool {
	switch b.Pattern {
	case PatternLiteral:
		return b.Name == name || b.Name == Wildcard
	case PatternPrefixed:
		return strings.HasPrefix(name, b.Name)
	}
	return false
}

// implies reports whether a binding's operation grants op: equal, ALL, or
// (for ALLOW only) DESCRIBE from READ/WRITE/DELETE/ALTER and
// DESCRIBE_CONFIGS from ALTER_CONFIGS.
func implies(granted, op Operation, perm Permission) bool {
	if granted == op || granted == OpAll {
		return true
	}
	if perm != Allow {
		return false
	}
	switch op {
	case OpDescribe:
		return granted == OpRead || granted == OpWrite || granted == OpDelete || granted == OpAlter
	case OpDescribeConfigs:
		return granted == OpAlterConfigs
	}
	return false
}

// ParseResourceType, ParseOperation, ParsePermission and ParsePattern read
// the names Kafka's tools print (case-insensitive, '-' for '_').
func ParseResourceType(s string) (ResourceType, bool) {
	for t, n := range resourceNames {
		if normalize(s) == n {
			return t, true
		}
	}
	return ResourceUnknown, false
}

// ParseOperation: see ParseResourceType.
func ParseOperation(s string) (Operation, bool) {
	for o, n := range opNames {
		if normalize(s) == n {
			return o, true
		}
	}
	return OpUnknown, false
}

// ParsePermission: see ParseResourceType.
func ParsePermission(s string) (Permission, bool) {
	switch normalize(s) {
	case "ALLOW":
		return Allow, true
	case "DENY":
		return Deny, true
	case "ANY":
		return PermissionAny, true
	}
	return PermissionUnknown, false
}

// ParsePattern: see ParseResourceType.
func ParsePattern(s string) (PatternType, bool) {
	for _, p := range []PatternType{PatternAny, PatternMatch, PatternLiteral, PatternPrefixed} {
		if normalize(s) == p.String() {
			return p, true
		}
	}
	return PatternUnknown, false
}

func normalize(s string) string {
	return strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(s)), "-", "_")
}
