package clustertest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/clustertest"
)

func rec(p int32, off int64, v string) clustertest.Record {
	return clustertest.Record{Partition: p, Offset: off, Value: v}
}

// ledgerOf sends values a..e and acknowledges a, b on partition 0 at 0, 1
// and c, d on partition 1 at 0, 1; e is sent and never acknowledged.
func ledgerOf() *clustertest.Ledger {
	l := clustertest.NewLedger()
	for _, v := range []string{"a", "b", "c", "d", "e"} {
		l.Send(v)
	}
	l.Ack(rec(0, 0, "a"))
	l.Ack(rec(0, 1, "b"))
	l.Ack(rec(1, 0, "c"))
	l.Ack(rec(1, 1, "d"))
	return l
}

func TestLedgerCheck(t *testing.T) {
	good := []clustertest.Record{rec(0, 0, "a"), rec(1, 0, "c"), rec(0, 1, "b"), rec(1, 1, "d")}
	for _, tc := range []struct {
		name  string
		read  []clustertest.Record
		check func(t *testing.T, r *clustertest.Report)
	}{
		{"every acknowledged record once, partitions interleaved", good, func(t *testing.T, r *clustertest.Report) {
			require.True(t, r.OK(), "%v", r)
			require.Equal(t, 4, r.Read)
			require.Equal(t, 4, r.Acked)
		}},
		{"an unacknowledged record read is no problem", append(good, rec(0, 2, "e")), func(t *testing.T, r *clustertest.Report) {
			require.True(t, r.OK(), "%v", r)
			require.Equal(t, 1, r.Unacked)
		}},
		{"lost", []clustertest.Record{rec(0, 0, "a"), rec(0, 1, "b"), rec(1, 0, "c")}, func(t *testing.T, r *clustertest.Report) {
			require.False(t, r.OK())
			require.Equal(t, []clustertest.Record{rec(1, 1, "d")}, r.Lost)
		}},
		{"duplicated", append(good, rec(1, 2, "d")), func(t *testing.T, r *clustertest.Report) {
			require.False(t, r.OK())
			require.Equal(t, []clustertest.Record{rec(1, 2, "d")}, r.Duplicates)
			require.Empty(t, r.Misordered)
		}},
		{"read at another offset", []clustertest.Record{rec(0, 0, "b"), rec(0, 1, "a"), rec(1, 0, "c"), rec(1, 1, "d")}, func(t *testing.T, r *clustertest.Report) {
			require.False(t, r.OK())
			require.Equal(t, [][2]clustertest.Record{{rec(0, 1, "b"), rec(0, 0, "b")}, {rec(0, 0, "a"), rec(0, 1, "a")}}, r.Moved)
		}},
		{"read in another partition", []clustertest.Record{rec(0, 0, "a"), rec(0, 1, "b"), rec(2, 0, "c"), rec(1, 1, "d")}, func(t *testing.T, r *clustertest.Report) {
			require.False(t, r.OK())
			require.Equal(t, [][2]clustertest.Record{{rec(1, 0, "c"), rec(2, 0, "c")}}, r.Moved)
		}},
		{"never sent", append(good, rec(1, 2, "zz")), func(t *testing.T, r *clustertest.Report) {
			require.False(t, r.OK())
			require.Equal(t, []clustertest.Record{rec(1, 2, "zz")}, r.Unknown)
		}},
		{"a gap", []clustertest.Record{rec(0, 0, "a"), rec(0, 1, "b"), rec(1, 0, "c"), rec(1, 2, "e"), rec(1, 1, "d")}, func(t *testing.T, r *clustertest.Report) {
			require.False(t, r.OK())
			require.Equal(t, []clustertest.Record{rec(1, 2, "e"), rec(1, 1, "d")}, r.Misordered, "a skip forward, then a step back")
		}},
		{"an offset twice", []clustertest.Record{rec(0, 0, "a"), rec(0, 0, "b")}, func(t *testing.T, r *clustertest.Report) {
			require.False(t, r.OK())
			require.Equal(t, []clustertest.Record{rec(0, 0, "b")}, r.Misordered)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, ledgerOf().Check(tc.read))
		})
	}
}

func TestLedgerConflictingAcks(t *testing.T) {
	l := ledgerOf()
	l.Ack(rec(0, 5, "a"))  // a second acknowledgement of a value
	l.Ack(rec(0, 6, "zz")) // an acknowledgement of a value never sent
	r := l.Check([]clustertest.Record{rec(0, 0, "a"), rec(1, 0, "c"), rec(0, 1, "b"), rec(1, 1, "d")})
	require.False(t, r.OK())
	require.Len(t, r.Conflicts, 2, "%v", r)
	require.Contains(t, r.String(), "acknowledged twice")
	require.Contains(t, r.String(), "never sent")
	require.Equal(t, 5, l.Acked(), "a, b, c, d and zz")
	require.Equal(t, 5, l.Sent())
}

func TestReportString(t *testing.T) {
	l := clustertest.NewLedger()
	var read []clustertest.Record
	for i := range 15 {
		v := string(rune('a' + i))
		l.Send(v)
		l.Ack(rec(0, int64(i), v))
	}
	r := l.Check(read)
	require.Len(t, r.Lost, 15)
	s := r.String()
	require.Contains(t, s, "lost 15")
	require.Contains(t, s, `lost: "a" at 0/0`)
	require.Contains(t, s, "lost: ... 5 more", "at most 10 of a kind are listed")
}

// TestLedgerTwoValuesAtOneOffset: an offset acknowledged for two values is
// a conflict - the first was overwritten after its acknowledgement, as an
// unclean election makes happen.
func TestLedgerTwoValuesAtOneOffset(t *testing.T) {
	l := clustertest.NewLedger()
	l.Send("a")
	l.Send("b")
	l.Ack(rec(0, 5, "a"))
	l.Ack(rec(0, 5, "b"))
	r := l.Check([]clustertest.Record{rec(0, 5, "b")})
	require.False(t, r.OK())
	require.Len(t, r.Conflicts, 1)
	require.Contains(t, r.Conflicts[0], "0/5 acknowledged for two values")
	require.Equal(t, []clustertest.Record{rec(0, 5, "a")}, r.Lost)
}

// TestReportOK: the checks of a whole run count as problems too.
func TestReportOK(t *testing.T) {
	for _, r := range []*clustertest.Report{
		{CommitsBackwards: []string{"partition 0: 3 after 5"}},
		{NotConsumed: []clustertest.Record{rec(0, 1, "a")}},
		{Diverged: []string{"t-0: the replicas differ"}},
	} {
		require.False(t, r.OK(), "%v", r)
		require.Contains(t, r.String(), "group commits backwards")
	}
	require.True(t, (&clustertest.Report{Read: 3, Acked: 3}).OK())
}
