// Package report holds what the benchmark commands share to read their
// flags and print their results: tables (aligned text or markdown), size
// names, integer lists and the machine's load.
package report

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Table prints a table between blank lines: right-aligned text columns,
// or a markdown table if markdown is set.
func Table(out io.Writer, markdown bool, header []string, lines [][]string) {
	fmt.Fprintln(out)
	if markdown {
		fmt.Fprintf(out, "| %s |\n", strings.Join(header, " | "))
		seps := make([]string, len(header))
		for i := range seps {
			seps[i] = "---:"
		}
		fmt.Fprintf(out, "|%s|\n", strings.Join(seps, "|"))
		for _, l := range lines {
			fmt.Fprintf(out, "| %s |\n", strings.Join(l, " | "))
		}
		fmt.Fprintln(out)
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, l := range lines {
		fmt.Fprintln(tw, strings.Join(l, "\t")+"\t")
	}
	tw.Flush()
	fmt.Fprintln(out)
}

// SizeName names a size in bytes: "100 B", "1 KiB".
func SizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// Ints parses a comma-separated list of integers, each at least least.
func Ints(s string, least int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			return nil, fmt.Errorf("%q is not an integer of at least %d", f, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// LoadAvg is the first three fields of /proc/loadavg ("unknown" where
// there is none): the machines are shared, so results say how busy it was.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
