package clustertest

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDump(t *testing.T) {
	out := `Dumping /d/t-0/00000000000000000000.log (300 bytes)
position: 0 baseOffset: 0 lastOffset: 2 count: 3 size: 120 crcValid: true codec: none firstTimestamp: 1 maxTimestamp: 1 producerId: 7 producerEpoch: 0 baseSequence: 0 partitionLeaderEpoch: 0
| offset: 0 timestamp: 1700000000000 key: null valueSize: 3 value: "abc" headers: 0
| offset: 1 timestamp: 1700000000000 key: "k" valueSize: 18 value: "x headers: 5 \"q\"\n" headers: 2
| offset: 2 timestamp: -1 key: null valueSize: 0 value: null headers: 0
1 batches, 3 records
`
	recs, err := parseDump(4, out)
	require.NoError(t, err)
	require.Equal(t, []Record{{4, 0, "abc"}, {4, 1, "x headers: 5 \"q\"\n"}, {4, 2, ""}}, recs)

	_, err = parseDump(0, `| offset: 3 timestamp: 1 key: null valueSize: 70 value: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"...(70 bytes) headers: 0`+"\n")
	require.ErrorContains(t, err, "not printed whole")
	_, err = parseDump(0, "| offset: x timestamp: 1\n")
	require.ErrorContains(t, err, "cannot parse")
	_, err = parseDump(0, "| offset: 1 timestamp: 1 key: null value: \"a\"\n")
	require.ErrorContains(t, err, "cannot parse")
}

func TestRaceReports(t *testing.T) {
	path := t.TempDir() + "/node1.stderr"
	log := "time=1 level=INFO msg=serving\n" +
		"==================\nWARNING: DATA RACE\nWrite at 0x1 by goroutine 7:\n  main.f()\n\nPrevious read at 0x1 by goroutine 8:\n  main.g()\n==================\n" +
		"time=2 level=INFO msg=more\n" +
		"==================\nWARNING: DATA RACE\nRead at 0x2 by goroutine 9:\n  main.h()\n==================\n"
	require.NoError(t, os.WriteFile(path, []byte(log), 0o644))
	reports, err := raceReports(path)
	require.NoError(t, err)
	require.Len(t, reports, 2)
	require.True(t, strings.HasPrefix(reports[0], "WARNING: DATA RACE\nWrite at 0x1"))
	require.True(t, strings.HasSuffix(reports[0], "main.g()"))
	require.Contains(t, reports[1], "main.h()")

	require.NoError(t, os.WriteFile(path, []byte("time=1 level=INFO msg=serving\n"), 0o644))
	reports, err = raceReports(path)
	require.NoError(t, err)
	require.Empty(t, reports)
}

func TestTailLines(t *testing.T) {
	path := t.TempDir() + "/log"
	require.NoError(t, os.WriteFile(path, []byte("one\ntwo\nthree\nfour\n"), 0o644))
	s, err := tailLines(path, 2, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "... (the start is in "+path+")\nthree\nfour\n", s)
	s, err = tailLines(path, 10, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "one\ntwo\nthree\nfour\n", s, "all of it")
	s, err = tailLines(path, 0, 9)
	require.NoError(t, err)
	require.Equal(t, "... (the start is in "+path+")\nfour\n", s, "the last 9 bytes, without the cut line")
	_, err = tailLines(path+".missing", 1, 10)
	require.ErrorIs(t, err, os.ErrNotExist)
}
