package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// "spool acls": the ACLs of a broker with an authorizer, over
// CreateAcls, DescribeAcls and DeleteAcls, like kafka-acls.

var aclsCommands = []subcommand{
	{"create", "grant (or deny) operations on a resource to a principal", runACLsCreate},
	{"list", "list the ACLs, or those a filter selects", runACLsList},
	{"delete", "delete the ACLs a filter selects", runACLsDelete},
}

func runACLs(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "acls", "--bootstrap-server HOST:PORT [flags]",
		"Manages the ACLs of a broker serving with --authorizer, like kafka-acls. The caller must\n"+
			"be allowed ALTER on the cluster (DESCRIBE to list) or be a super user: authenticate with\n"+
			"--sasl-* or --tls-* as any client does.",
		aclsCommands, args, stdout, stderr)
}

// aclFlags are a binding's or a filter's flags.
type aclFlags struct {
	principal, host, operation, permission, pattern *string
	topic, group, txnID                             *string
	cluster                                         *bool
}

func addACLFlags(fs *flag.FlagSet, filter bool) *aclFlags {
	any := ""
	if filter {
		any = " (default: any)"
	}
	af := &aclFlags{
		principal:  fs.String("principal", "", "the `principal`, e.g. User:alice, or User:* for everyone"+any),
		host:       fs.String("host", map[bool]string{false: "*"}[filter], "the client `address` the ACL applies to; * for any"+any),
		operation:  fs.String("operation", "", "the `operations`, comma-separated: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL"+any),
		permission: fs.String("permission", map[bool]string{false: "allow"}[filter], "`allow` or deny"+any),
		pattern:    fs.String("pattern", map[bool]string{false: "literal", true: "any"}[filter], "how the resource name matches: `literal` (the name, or * for all), prefixed (names starting with it)"+map[bool]string{true: "; a filter also takes any (either, with this name) and match (every ACL that applies to this name)"}[filter]),
		topic:      fs.String("topic", "", "the topic `name` (or prefix)"),
		group:      fs.String("group", "", "the consumer group `name` (or prefix)"),
		txnID:      fs.String("transactional-id", "", "the transactional `id` (or prefix)"),
		cluster:    fs.Bool("cluster", false, "the cluster itself (kafka-cluster)"),
	}
	return af
}

// resource is the resource the flags name: ok false if more than one;
// none is ResourceAny.
func (af *aclFlags) resource() (rt acl.ResourceType, name *string, err error) {
	n := 0
	rt = acl.ResourceAny
	for _, r := range []struct {
		v  string
		rt acl.ResourceType
	}{{*af.topic, acl.ResourceTopic}, {*af.group, acl.ResourceGroup}, {*af.txnID, acl.ResourceTransactionalID}} {
		if r.v != "" {
			n++
			rt, name = r.rt, &r.v
		}
	}
	if *af.cluster {
		n++
		rt, name = acl.ResourceCluster, strPtr(acl.ClusterName)
	}
	if n > 1 {
		return 0, nil, fmt.Errorf("name one resource: --topic, --group, --transactional-id or --cluster")
	}
	return rt, name, nil
}

func strPtr(s string) *string { return &s }

func (af *aclFlags) operations(filter bool) ([]acl.Operation, error) {
	if *af.operation == "" {
		if filter {
			return []acl.Operation{acl.OpAny}, nil
		}
		return nil, fmt.Errorf("--operation is required")
	}
	var ops []acl.Operation
	for _, s := range strings.Split(*af.operation, ",") {
		op, ok := acl.ParseOperation(s)
		if !ok || op == acl.OpUnknown || (op == acl.OpAny && !filter) {
			return nil, fmt.Errorf("--operation %q: unknown operation %q", *af.operation, s)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func runACLsCreate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("acls", "create", "--bootstrap-server HOST:PORT --principal P --operation OPS (--topic T|--group G|--transactional-id I|--cluster) [flags]",
		"Creates ACLs: one per operation, for the principal, on the resource. Deny wins over allow;\n"+
			"ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE.", stderr)
	af := addACLFlags(fs, false)
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	rt, name, err := af.resource()
	if err == nil && name == nil {
		err = fmt.Errorf("name the resource: --topic, --group, --transactional-id or --cluster")
	}
	if err != nil {
		return usageError(fs, "%v", err)
	}
	ops, err := af.operations(false)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	perm, ok := acl.ParsePermission(*af.permission)
	if !ok || perm == acl.PermissionAny {
		return usageError(fs, "--permission %q: want allow or deny", *af.permission)
	}
	pattern, ok := acl.ParsePattern(*af.pattern)
	if !ok || (pattern != acl.PatternLiteral && pattern != acl.PatternPrefixed) {
		return usageError(fs, "--pattern %q: want literal or prefixed", *af.pattern)
	}
	if *af.principal == "" {
		return usageError(fs, "--principal is required, e.g. User:alice")
	}
	if code, ok := of.check(); !ok {
		return code
	}
	cmd := "spool acls create"
	a, ctx, cancel, ok := of.dial(ctx, cmd, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	req := kmsg.NewPtrCreateACLsRequest()
	var bs []acl.Binding
	for _, op := range ops {
		b := acl.Binding{ResourceType: rt, Name: *name, Pattern: pattern, Principal: *af.principal, Host: *af.host, Operation: op, Permission: perm}
		bs = append(bs, b)
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.Name, kmsg.ACLResourcePatternType(b.Pattern)
		c.Principal, c.Host, c.Operation, c.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
		req.Creations = append(req.Creations, c)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, a.failed(ctx, err))
		return exitProblem
	}
	code := exitOK
	for i, r := range resp.Results {
		if i >= len(bs) {
			break
		}
		if r.ErrorCode != 0 {
			fmt.Fprintf(stderr, "%s: %v: %v\n", cmd, bs[i], newKafkaError("", r.ErrorCode, r.ErrorMessage))
			code = exitProblem
			continue
		}
		fmt.Fprintf(stdout, "Created: %v\n", bs[i])
	}
	return code
}

// filterFlags parses a filter's flags.
func filterFrom(fs *flag.FlagSet, af *aclFlags) (acl.Filter, []acl.Operation, int, bool) {
	rt, name, err := af.resource()
	if err != nil {
		return acl.Filter{}, nil, usageError(fs, "%v", err), false
	}
	ops, err := af.operations(true)
	if err != nil {
		return acl.Filter{}, nil, usageError(fs, "%v", err), false
	}
	perm := acl.PermissionAny
	if *af.permission != "" {
		var ok bool
		if perm, ok = acl.ParsePermission(*af.permission); !ok {
			return acl.Filter{}, nil, usageError(fs, "--permission %q: want allow, deny or any", *af.permission), false
		}
	}
	pattern, ok := acl.ParsePattern(*af.pattern)
	if !ok {
		return acl.Filter{}, nil, usageError(fs, "--pattern %q: want any, match, literal or prefixed", *af.pattern), false
	}
	if pattern == acl.PatternMatch && name == nil {
		return acl.Filter{}, nil, usageError(fs, "--pattern match needs a resource name"), false
	}
	f := acl.Filter{ResourceType: rt, Name: name, Pattern: pattern, Permission: perm}
	if *af.principal != "" {
		f.Principal = af.principal
	}
	if *af.host != "" {
		f.Host = af.host
	}
	return f, ops, exitOK, true
}

func kmsgFilter(f acl.Filter, op acl.Operation) (kmsg.ACLResourceType, *string, kmsg.ACLResourcePatternType, *string, *string, kmsg.ACLOperation, kmsg.ACLPermissionType) {
	return kmsg.ACLResourceType(f.ResourceType), f.Name, kmsg.ACLResourcePatternType(f.Pattern), f.Principal, f.Host, kmsg.ACLOperation(op), kmsg.ACLPermissionType(f.Permission)
}

func runACLsList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("acls", "list", "--bootstrap-server HOST:PORT [filter flags]",
		"Lists the ACLs, or those the filter flags select, a line each.", stderr)
	af := addACLFlags(fs, true)
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	f, ops, code, ok := filterFrom(fs, af)
	if !ok {
		return code
	}
	if code, ok := of.check(); !ok {
		return code
	}
	cmd := "spool acls list"
	a, ctx, cancel, ok := of.dial(ctx, cmd, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PERMISSION\tPRINCIPAL\tHOST\tOPERATION\tRESOURCE\tNAME\tPATTERN")
	for _, op := range ops {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType = kmsgFilter(f, op)
		resp, err := req.RequestWith(ctx, a.cl)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, a.failed(ctx, err))
			return exitProblem
		}
		if resp.ErrorCode != 0 {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, newKafkaError("", resp.ErrorCode, resp.ErrorMessage))
			return exitProblem
		}
		for _, r := range resp.Resources {
			for _, e := range r.ACLs {
				fmt.Fprintf(tw, "%v\t%s\t%s\t%v\t%v\t%s\t%v\n", acl.Permission(e.PermissionType), e.Principal, e.Host,
					acl.Operation(e.Operation), acl.ResourceType(r.ResourceType), r.ResourceName, acl.PatternType(r.ResourcePatternType))
			}
		}
	}
	tw.Flush()
	return exitOK
}

func runACLsDelete(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("acls", "delete", "--bootstrap-server HOST:PORT [filter flags] [--all]",
		"Deletes the ACLs the filter flags select and prints them. With no filter flag it deletes\n"+
			"nothing unless --all is given.", stderr)
	af := addACLFlags(fs, true)
	all := fs.Bool("all", false, "with no filter flag: delete every ACL")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	f, ops, code, ok := filterFrom(fs, af)
	if !ok {
		return code
	}
	noFilter := f.ResourceType == acl.ResourceAny && f.Principal == nil && f.Host == nil && ops[0] == acl.OpAny && f.Permission == acl.PermissionAny
	switch {
	case noFilter && !*all:
		return usageError(fs, "no filter: give filter flags, or --all to delete every ACL")
	case !noFilter && *all:
		// The filter decides what goes; --all beside it would be ignored.
		return usageError(fs, "--all deletes every ACL: give it without filter flags, or drop it to delete what the filter flags select")
	}
	if code, ok := of.check(); !ok {
		return code
	}
	cmd := "spool acls delete"
	a, ctx, cancel, ok := of.dial(ctx, cmd, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	req := kmsg.NewPtrDeleteACLsRequest()
	for _, op := range ops {
		kf := kmsg.NewDeleteACLsRequestFilter()
		kf.ResourceType, kf.ResourceName, kf.ResourcePatternType, kf.Principal, kf.Host, kf.Operation, kf.PermissionType = kmsgFilter(f, op)
		req.Filters = append(req.Filters, kf)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, a.failed(ctx, err))
		return exitProblem
	}
	code = exitOK
	n := 0
	for _, r := range resp.Results {
		if r.ErrorCode != 0 {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, newKafkaError("", r.ErrorCode, r.ErrorMessage))
			code = exitProblem
			continue
		}
		for _, m := range r.MatchingACLs {
			n++
			b := acl.Binding{ResourceType: acl.ResourceType(m.ResourceType), Name: m.ResourceName, Pattern: acl.PatternType(m.ResourcePatternType),
				Principal: m.Principal, Host: m.Host, Operation: acl.Operation(m.Operation), Permission: acl.Permission(m.PermissionType)}
			fmt.Fprintf(stdout, "Deleted: %v\n", b)
		}
	}
	if code == exitOK {
		fmt.Fprintf(stdout, "%d ACLs deleted.\n", n)
	}
	return code
}
