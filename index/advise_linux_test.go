package index

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An index's map is advised for random reads (VmFlags "rr" in smaps): a
// fault reads its page only. Without it, opening an index a crash left
// untrimmed zero-fills a readahead window of its unwritten pages.
func TestMapIsAdvisedRandom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "00000000000000000000.index")
	x, err := OpenOffset(nil, path, 0, 1<<20, true)
	require.NoError(t, err)
	defer x.Close()
	smaps, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	var found bool
	var flags string
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && strings.Contains(f[0], "-") && f[len(f)-1] == path:
			found = true
		case found && len(f) > 0 && f[0] == "VmFlags:":
			flags = line
			found = false
		}
	}
	require.NotEmpty(t, flags, "no mapping of %s in smaps", path)
	require.Contains(t, strings.Fields(flags), "rr", "VmFlags of the index map: %s", flags)
}
