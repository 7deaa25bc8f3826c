package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
)

// The groups commands are split in two: a run function parses the flags
// and opens the broker, and a function of the same name without "run"
// does the work on an open *spool.Broker. The split lets tests drive the
// work while consumers of the same broker are members of the group, which
// a second process could not do: the data directory is locked.

// groupsCommands are the subcommands of "spool groups".
var groupsCommands = []subcommand{
	{"list", "list the consumer groups with their state", runGroupsList},
	{"describe", "describe a group: members, assignments, committed offsets and lag", runGroupsDescribe},
	{"delete", "delete a group without members and its committed offsets", runGroupsDelete},
	{"reset-offsets", "plan, or with --execute apply, new committed offsets for a group", runGroupsResetOffsets},
}

// runGroups implements "spool groups": it dispatches to list, describe,
// delete or reset-offsets.
func runGroups(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "groups", "[flags]",
		"Manages the consumer groups of a data directory and their committed offsets,\nlike kafka-consumer-groups.",
		groupsCommands, args, stdout, stderr)
}

// newGroupsFlagSet returns the flag set of "spool groups NAME", with the
// broker flags defined: --data, and --flush if flush (withFlush) - for
// the commands that commit offsets, which are records of
// __consumer_offsets.
func newGroupsFlagSet(name string, flush bool, args, doc string, stderr io.Writer) (*flag.FlagSet, *brokerFlags) {
	return newSubcommandFlagSet("groups", name, args, doc, flush, stderr)
}

// withBroker opens the broker, runs fn on it and closes it. An error from
// fn is printed on stderr, prefixed with the command's name, and makes the
// exit status exitProblem.
func withBroker(name string, bf *brokerFlags, stderr io.Writer, fn func(*spool.Broker) error) int {
	b, ok := bf.open(name, useExisting, stderr)
	if !ok {
		return exitProblem
	}
	code := exitOK
	if err := fn(b); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		code = exitProblem
	}
	return closeBroker(name, b, code, stderr)
}

func runGroupsList(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newGroupsFlagSet("list", withoutFlush, "[flags]",
		"Prints the groups the broker knows, sorted, one a line: name, state and protocol type\n"+
			"(consumer for Kafka consumers). Group membership lives in memory: a broker opened\n"+
			"afresh, as this command does, knows only the groups with committed offsets, all Empty.", stderr)
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	return withBroker("spool groups list", bf, stderr, func(b *spool.Broker) error {
		listGroups(b, stdout)
		return nil
	})
}

// listGroups prints a table of the groups: name, state, protocol type.
func listGroups(b *spool.Broker, w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "GROUP\tSTATE\tPROTOCOL-TYPE\n")
	for _, l := range b.Groups().List() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Group, l.State, orDash(l.ProtocolType))
	}
	tw.Flush()
}

func runGroupsDescribe(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newGroupsFlagSet("describe", withoutFlush, "--group G [flags]",
		"Describes a group, like kafka-consumer-groups --describe: its state, protocol type and\n"+
			"protocol, generation and leader; its members with their client and host and, while the\n"+
			"group is Stable, their assignment; then, for each partition the group has an offset\n"+
			"for or is assigned, the committed offset (CURRENT-OFFSET), the log end offset, the high\n"+
			"watermark, LAG = high watermark - committed offset, and the member consuming it.", stderr)
	name := fs.String("group", "", "the `name` of the group to describe")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if *name == "" {
		return usageError(fs, "--group is required")
	}
	return withBroker("spool groups describe", bf, stderr, func(b *spool.Broker) error {
		return describeGroup(b, *name, stdout)
	})
}

// partitionOffsets is a row of describe's offsets table.
type partitionOffsets struct {
	tp        spool.TopicPartition
	committed int64 // -1: none
	end, hw   int64 // -1: the partition does not exist
	member    string
}

// describeGroup prints a group's description.
func describeGroup(b *spool.Broker, name string, w io.Writer) error {
	d, err := b.Groups().Describe(name)
	if errors.Is(err, group.ErrGroupIDNotFound) {
		// A KIP-848 consumer group: shown in the classic layout, its
		// epoch as the generation and its assignor as the protocol.
		cd, cerr := b.Groups().ConsumerDescribe(name)
		if cerr != nil {
			return fmt.Errorf("group %q does not exist", name)
		}
		d, err = group.Description{Group: name, State: cd.State, ProtocolType: group.ConsumerProtocolType,
			Protocol: cd.Assignor, Generation: cd.Epoch}, nil
		for _, m := range cd.Members {
			d.Members = append(d.Members, group.MemberDescription{MemberID: m.MemberID, GroupInstanceID: m.InstanceID,
				ClientID: m.ClientID, ClientHost: m.ClientHost,
				Assignment: group.EncodeAssignment(group.Assignment{Version: group.AssignmentVersion, Partitions: m.Assignment})})
		}
	}
	if err != nil {
		return err
	}
	committed, err := b.Groups().FetchOffsets(name, nil)
	if err != nil {
		return err
	}

	fmt.Fprintf(w, "Group: %s\tState: %s\tProtocolType: %s\tProtocol: %s\tGeneration: %d\tLeader: %s\tMembers: %d\n",
		d.Group, d.State, orDash(d.ProtocolType), orDash(d.Protocol), d.Generation, orDash(d.LeaderID), len(d.Members))

	// Members and what they are assigned. Assignments are known only while
	// the group is Stable, and readable only for consumer groups.
	rows := map[spool.TopicPartition]*partitionOffsets{}
	row := func(tp spool.TopicPartition) *partitionOffsets {
		r := rows[tp]
		if r == nil {
			r = &partitionOffsets{tp: tp, committed: -1, end: -1, hw: -1}
			rows[tp] = r
		}
		return r
	}
	if len(d.Members) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "MEMBER-ID\tINSTANCE-ID\tCLIENT-ID\tHOST\tASSIGNMENT\n")
		for _, m := range d.Members {
			assigned := "-"
			if d.ProtocolType == group.ConsumerProtocolType && m.Assignment != nil {
				a, err := group.DecodeAssignment(m.Assignment)
				if err != nil {
					assigned = "(undecodable)"
				} else {
					var tps []string
					for _, topic := range slices.Sorted(maps.Keys(a.Partitions)) {
						for _, p := range a.Partitions[topic] {
							tp := spool.TopicPartition{Topic: topic, Partition: p}
							row(tp).member = m.MemberID
							tps = append(tps, tp.String())
						}
					}
					assigned = strings.Join(tps, ",")
					if assigned == "" {
						assigned = "(none)"
					}
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, orDash(m.GroupInstanceID), orDash(m.ClientID), orDash(m.ClientHost), assigned)
		}
		tw.Flush()
	}

	for tp, o := range committed {
		row(tp).committed = o.Offset
	}
	if len(rows) == 0 {
		return nil
	}
	for tp, r := range rows {
		if p, err := b.Partition(tp.Topic, tp.Partition); err == nil {
			r.end, r.hw = p.EndOffset(), p.HighWatermark()
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tHIGH-WATERMARK\tLAG\tMEMBER-ID\n")
	for _, tp := range slices.SortedFunc(maps.Keys(rows), compareTopicPartitions) {
		r := rows[tp]
		lag := "-"
		if r.committed >= 0 && r.hw >= 0 {
			lag = strconv.FormatInt(max(r.hw-r.committed, 0), 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", tp.Topic, tp.Partition,
			offsetOrDash(r.committed), offsetOrDash(r.end), offsetOrDash(r.hw), lag, orDash(r.member))
	}
	tw.Flush()
	return nil
}

func runGroupsDelete(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newGroupsFlagSet("delete", withFlush, "--group G [flags]",
		"Deletes a group and its committed offsets. Only a group without members (Empty) can be\n"+
			"deleted.", stderr)
	name := fs.String("group", "", "the `name` of the group to delete")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if *name == "" {
		return usageError(fs, "--group is required")
	}
	return withBroker("spool groups delete", bf, stderr, func(b *spool.Broker) error {
		if err := deleteGroup(b, *name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Deleted group %s.\n", *name)
		return nil
	})
}

// deleteGroup deletes a group without members.
func deleteGroup(b *spool.Broker, name string) error {
	err := b.Groups().Delete(name)[name]
	switch {
	case errors.Is(err, group.ErrGroupIDNotFound):
		return fmt.Errorf("group %q does not exist", name)
	case errors.Is(err, group.ErrNonEmptyGroup):
		return notEmptyError(b, name, "deleted")
	}
	return err
}

// notEmptyError explains that a group with members cannot be changed. It
// wraps group.ErrNonEmptyGroup.
func notEmptyError(b *spool.Broker, name, what string) error {
	d, err := b.Groups().Describe(name)
	if err != nil {
		return fmt.Errorf("group %q has members; it can be %s only when Empty (%w)", name, what, group.ErrNonEmptyGroup)
	}
	return fmt.Errorf("group %q is %s with %d member(s); it can be %s only when Empty: stop its consumers first (%w)",
		name, d.State, len(d.Members), what, group.ErrNonEmptyGroup)
}

// resetSpec is where reset-offsets moves a partition's committed offset;
// exactly one of its ways is set.
type resetSpec struct {
	earliest, latest bool
	offset           *int64
	datetime         *time.Time
	shift            *int64
}

// resetRow is one partition of a reset plan.
type resetRow struct {
	tp        spool.TopicPartition
	committed int64 // -1: none
	next      int64
}

func runGroupsResetOffsets(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newGroupsFlagSet("reset-offsets", withFlush,
		"--group G --topic T [--partition P] (--to-earliest | --to-latest | --to-offset N | --to-datetime TIME | --shift-by N) [--execute] [flags]",
		"Moves a group's committed offsets for a topic's partitions (all of them, or --partition),\n"+
			"like kafka-consumer-groups --reset-offsets. It prints the plan - each partition's current\n"+
			"committed offset and its new one - and without --execute changes nothing. With --execute\n"+
			"it commits the new offsets, which it can do only while the group has no members (Empty);\n"+
			"a group that does not exist is created. New offsets outside a partition's log are\n"+
			"clamped to [start offset, high watermark].", stderr)
	name := fs.String("group", "", "the `name` of the group whose offsets to reset")
	topic := fs.String("topic", "", "the `name` of the topic whose partitions to reset")
	var partition *int32
	fs.Func("partition", "reset only this `partition` (default: every partition of the topic)", func(s string) error {
		p, err := strconv.ParseInt(s, 10, 32)
		if err != nil || p < 0 {
			return errors.New("want a partition number")
		}
		partition = new(int32(p))
		return nil
	})
	var spec resetSpec
	fs.BoolVar(&spec.earliest, "to-earliest", false, "reset to each partition's start offset")
	fs.BoolVar(&spec.latest, "to-latest", false, "reset to each partition's high watermark")
	fs.Func("to-offset", "reset to `offset` N", func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("want an offset")
		}
		spec.offset = &n
		return nil
	})
	fs.Func("to-datetime", "reset to the first record at or after `time`, RFC 3339 (2024-05-01T12:00:00Z); the high watermark if there is none", func(s string) error {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return errors.New("want an RFC 3339 time such as 2024-05-01T12:00:00Z")
		}
		spec.datetime = &t
		return nil
	})
	fs.Func("shift-by", "move each committed offset by `N` (negative: back); needs a committed offset", func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("want a number of offsets")
		}
		spec.shift = &n
		return nil
	})
	execute := fs.Bool("execute", false, "apply the plan (default: only print it)")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	// Without --execute nothing is committed, so there is nothing to flush.
	if code, ok := requireFlag(fs, *execute, "execute", "flush"); !ok {
		return code
	}
	ways := 0
	for _, set := range []bool{spec.earliest, spec.latest, spec.offset != nil, spec.datetime != nil, spec.shift != nil} {
		if set {
			ways++
		}
	}
	switch {
	case *name == "":
		return usageError(fs, "--group is required")
	case *topic == "":
		return usageError(fs, "--topic is required")
	case ways != 1:
		return usageError(fs, "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime and --shift-by")
	}
	return withBroker("spool groups reset-offsets", bf, stderr, func(b *spool.Broker) error {
		plan, err := planReset(b, *name, *topic, partition, spec)
		if err != nil {
			return err
		}
		if *execute {
			if err := applyReset(b, *name, plan); err != nil {
				return err
			}
		}
		printResetPlan(stdout, plan)
		if *execute {
			fmt.Fprintf(stdout, "Reset the offsets of group %s.\n", *name)
			return nil
		}
		fmt.Fprintf(stderr, "Dry run: nothing changed. Add --execute to commit these offsets.\n")
		if d, err := b.Groups().Describe(*name); err == nil && d.State != group.Empty {
			fmt.Fprintf(stderr, "Note: group %s is %s; --execute is refused until it has no members.\n", *name, d.State)
		}
		return nil
	})
}

// planReset computes the new committed offset of each partition to reset:
// the one partition named, or every partition of the topic.
func planReset(b *spool.Broker, name, topic string, partition *int32, spec resetSpec) ([]resetRow, error) {
	var ids []int32
	if partition != nil {
		ids = []int32{*partition}
	} else {
		d, err := b.DescribeTopic(topic)
		if err != nil {
			return nil, err
		}
		for _, p := range d.Partitions {
			ids = append(ids, p.Partition)
		}
	}
	tps := make([]spool.TopicPartition, len(ids))
	for i, id := range ids {
		tps[i] = spool.TopicPartition{Topic: topic, Partition: id}
	}
	committed, err := b.Groups().FetchOffsets(name, tps)
	if err != nil {
		return nil, err
	}
	plan := make([]resetRow, 0, len(tps))
	for _, tp := range tps {
		p, err := b.Partition(tp.Topic, tp.Partition)
		if err != nil {
			return nil, err
		}
		r := resetRow{tp: tp, committed: -1}
		if o, ok := committed[tp]; ok {
			r.committed = o.Offset
		}
		start, hw := p.StartOffset(), p.HighWatermark()
		switch {
		case spec.earliest:
			r.next = start
		case spec.latest:
			r.next = hw
		case spec.offset != nil:
			r.next = *spec.offset
		case spec.datetime != nil:
			off, ok, err := p.OffsetForTime(*spec.datetime)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", tp, err)
			}
			r.next = hw
			if ok {
				r.next = off
			}
		case spec.shift != nil:
			if r.committed < 0 {
				return nil, fmt.Errorf("cannot shift the offset of %s: group %q has no committed offset for it", tp, name)
			}
			r.next = r.committed + *spec.shift
			switch {
			case *spec.shift > 0 && r.next < r.committed: // overflowed
				r.next = hw
			case *spec.shift < 0 && r.next > r.committed:
				r.next = start
			}
		}
		r.next = min(max(r.next, start), hw)
		plan = append(plan, r)
	}
	return plan, nil
}

// applyReset commits a reset plan's offsets for a group without members.
func applyReset(b *spool.Broker, name string, plan []resetRow) error {
	offsets := make(map[spool.TopicPartition]int64, len(plan))
	for _, r := range plan {
		offsets[r.tp] = r.next
	}
	err := b.Groups().ResetOffsets(name, offsets)
	if errors.Is(err, group.ErrNonEmptyGroup) {
		return notEmptyError(b, name, "reset")
	}
	return err
}

// printResetPlan prints a table of the partitions' current and new offsets.
func printResetPlan(w io.Writer, plan []resetRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TOPIC\tPARTITION\tCURRENT-OFFSET\tNEW-OFFSET\n")
	for _, r := range plan {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", r.tp.Topic, r.tp.Partition, offsetOrDash(r.committed), r.next)
	}
	tw.Flush()
}

// compareTopicPartitions orders partitions by topic, then number.
func compareTopicPartitions(a, b spool.TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

// orDash is s, or "-" when s is empty, so that table columns stay aligned
// and countable.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// offsetOrDash is an offset, or "-" for none (-1).
func offsetOrDash(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}
