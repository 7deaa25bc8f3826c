package clustertest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/clustertest"
)

// TestSchedule: a seed draws the same faults again; another seed others;
// every kind comes once in each run of len(kinds) faults; holds stay in
// their bounds. No process is started.
func TestSchedule(t *testing.T) {
	c, err := clustertest.NewCluster(clustertest.Options{Binary: "/bin/true", Nodes: 5, LinkProxies: true})
	require.NoError(t, err)
	defer c.Close()
	opts := clustertest.ScheduleOptions{Topics: []string{"a", "b"}, Partitions: 3, Group: "g",
		MinHold: time.Second, MaxHold: 3 * time.Second}
	draw := func(seed uint64, n int) []clustertest.Fault {
		s := clustertest.NewSchedule(c, seed, opts)
		var out []clustertest.Fault
		for range n {
			f := s.Next()
			if f.Kind != clustertest.KindRolling {
				require.GreaterOrEqual(t, f.Hold, opts.MinHold)
				require.LessOrEqual(t, f.Hold, opts.MaxHold)
			}
			out = append(out, f)
		}
		return out
	}
	show := func(fs []clustertest.Fault) []string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s %v %v", f.Kind, f.Nemesis, f.Hold))
		}
		return out
	}
	kinds := c.Kinds()
	require.Len(t, kinds, 10, "every kind but the full disk: no Options.DiskBytes")
	a := draw(7, 3*len(kinds))
	require.Equal(t, show(a), show(draw(7, 3*len(kinds))), "the same seed, the same faults")
	require.NotEqual(t, show(a), show(draw(8, 3*len(kinds))), "another seed, other faults")
	for i := 0; i < len(a); i += len(kinds) {
		var got []clustertest.Kind
		for _, f := range a[i : i+len(kinds)] {
			got = append(got, f.Kind)
		}
		require.ElementsMatch(t, kinds, got, "faults %d to %d: each kind once", i, i+len(kinds)-1)
	}
}
