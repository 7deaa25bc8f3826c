package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// "spool quotas": client quotas over DescribeClientQuotas and
// AlterClientQuotas, like kafka-configs --entity-type users|clients.

var quotasCommands = []subcommand{
	{"alter", "set or remove quotas of a user, a client id, or both", runQuotasAlter},
	{"describe", "show the quotas set, or those of an entity", runQuotasDescribe},
}

func runQuotas(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "quotas", "--bootstrap-server HOST:PORT [flags]",
		"Manages client quotas, like kafka-configs --entity-type users|clients: producer_byte_rate and\n"+
			"consumer_byte_rate (bytes/s), request_percentage (of one request handler's time) for a user,\n"+
			"a client id, or both; --user-default and --client-id-default set the defaults. The most\n"+
			"specific quota set applies, in Kafka's order.",
		quotasCommands, args, stdout, stderr)
}

type entityFlags struct {
	user, client               *string
	userDefault, clientDefault *bool
}

func addEntityFlags(fs *flag.FlagSet) *entityFlags {
	return &entityFlags{
		user:          fs.String("user", "", "the user `name` (a principal's name: alice for User:alice; ANONYMOUS for clients that do not authenticate)"),
		userDefault:   fs.Bool("user-default", false, "the default user: every user without a quota of its own"),
		client:        fs.String("client-id", "", "the client `id`"),
		clientDefault: fs.Bool("client-id-default", false, "the default client id"),
	}
}

// parts returns the entity's components; none means every entity
// (describe).
func (ef *entityFlags) parts() ([][2]*string, error) {
	var out [][2]*string
	if *ef.user != "" && *ef.userDefault {
		return nil, fmt.Errorf("--user and --user-default exclude each other")
	}
	if *ef.client != "" && *ef.clientDefault {
		return nil, fmt.Errorf("--client-id and --client-id-default exclude each other")
	}
	typ := func(s string) *string { return &s }
	switch {
	case *ef.user != "":
		out = append(out, [2]*string{typ("user"), ef.user})
	case *ef.userDefault:
		out = append(out, [2]*string{typ("user"), nil})
	}
	switch {
	case *ef.client != "":
		out = append(out, [2]*string{typ("client-id"), ef.client})
	case *ef.clientDefault:
		out = append(out, [2]*string{typ("client-id"), nil})
	}
	return out, nil
}

func runQuotasAlter(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("quotas", "alter", "--bootstrap-server HOST:PORT (--user U|--user-default) (--client-id C|--client-id-default) [--set K=V,...] [--remove K,...]",
		"Sets and removes quotas of one entity: a user, a client id, or a user's client id.", stderr)
	ef := addEntityFlags(fs)
	set := fs.String("set", "", "quotas to set, `key=value,...`: producer_byte_rate, consumer_byte_rate, request_percentage")
	remove := fs.String("remove", "", "quota `keys` to remove, comma-separated")
	validate := fs.Bool("validate-only", false, "check the change with the broker without making it")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	parts, err := ef.parts()
	if err == nil && len(parts) == 0 {
		err = fmt.Errorf("name the entity: --user or --user-default, --client-id or --client-id-default")
	}
	if err != nil {
		return usageError(fs, "%v", err)
	}
	entry := kmsg.NewAlterClientQuotasRequestEntry()
	for _, p := range parts {
		entry.Entity = append(entry.Entity, kmsg.AlterClientQuotasRequestEntryEntity{Type: *p[0], Name: p[1]})
	}
	for _, kv := range strings.Split(*set, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil {
			return usageError(fs, "--set %q: want key=number", kv)
		}
		entry.Ops = append(entry.Ops, kmsg.AlterClientQuotasRequestEntryOp{Key: strings.TrimSpace(k), Value: f})
	}
	for _, k := range strings.Split(*remove, ",") {
		if k = strings.TrimSpace(k); k != "" {
			entry.Ops = append(entry.Ops, kmsg.AlterClientQuotasRequestEntryOp{Key: k, Remove: true})
		}
	}
	if len(entry.Ops) == 0 {
		return usageError(fs, "nothing to change: give --set or --remove")
	}
	if code, ok := of.check(); !ok {
		return code
	}
	cmd := "spool quotas alter"
	a, ctx, cancel, ok := of.dial(ctx, cmd, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	req := kmsg.NewPtrAlterClientQuotasRequest()
	req.Entries, req.ValidateOnly = append(req.Entries, entry), *validate
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, a.failed(ctx, err))
		return exitProblem
	}
	if len(resp.Entries) == 1 && resp.Entries[0].ErrorCode != 0 {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, newKafkaError("", resp.Entries[0].ErrorCode, resp.Entries[0].ErrorMessage))
		return exitProblem
	}
	if *validate {
		fmt.Fprintln(stdout, "Valid; nothing changed (--validate-only).")
	} else {
		fmt.Fprintln(stdout, "Quotas changed.")
	}
	return exitOK
}

func runQuotasDescribe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("quotas", "describe", "--bootstrap-server HOST:PORT [--user U|--user-default] [--client-id C|--client-id-default]",
		"Shows the quotas set: all of them, or those of entities with the user or client id given.", stderr)
	ef := addEntityFlags(fs)
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	parts, err := ef.parts()
	if err != nil {
		return usageError(fs, "%v", err)
	}
	if code, ok := of.check(); !ok {
		return code
	}
	cmd := "spool quotas describe"
	a, ctx, cancel, ok := of.dial(ctx, cmd, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	req := kmsg.NewPtrDescribeClientQuotasRequest()
	for _, p := range parts {
		c := kmsg.DescribeClientQuotasRequestComponent{EntityType: *p[0], MatchType: 1, Match: p[1]}
		if p[1] != nil {
			c.MatchType = 0
		}
		req.Components = append(req.Components, c)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, a.failed(ctx, err))
		return exitProblem
	}
	if resp.ErrorCode != 0 {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, newKafkaError("", resp.ErrorCode, resp.ErrorMessage))
		return exitProblem
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENTITY\tQUOTAS")
	for _, e := range resp.Entries {
		var ent, vals []string
		for _, p := range e.Entity {
			name := "<default>"
			if p.Name != nil {
				name = *p.Name
			}
			ent = append(ent, p.Type+"="+name)
		}
		for _, v := range e.Values {
			vals = append(vals, fmt.Sprintf("%s=%s", v.Key, strconv.FormatFloat(v.Value, 'f', -1, 64)))
		}
		fmt.Fprintf(tw, "%s\t%s\n", strings.Join(ent, ","), strings.Join(vals, ","))
	}
	tw.Flush()
	return exitOK
}
