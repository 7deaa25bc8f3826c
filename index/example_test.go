package index_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spoolmq/spool/index"
)

// An offset index maps the last offset of some batches to their positions;
// a lookup gives the nearest entry at or before the target, where a scan of
// the log begins.
func ExampleOpenOffset() {
	dir, _ := os.MkdirTemp("", "index-example-")
	defer os.RemoveAll(dir)
	x, err := index.OpenOffset(nil, filepath.Join(dir, "00000000000000001000.index"), 1000, 4096, true)
	if err != nil {
		panic(err)
	}
	defer x.Close()
	x.Append(1009, 0)    // batch 1000-1009 at byte 0
	x.Append(1019, 4200) // batch 1010-1019 at byte 4200
	x.Append(1029, 8500)
	e, ok, _ := x.Lookup(1025)
	fmt.Println(e.Offset, e.Position, ok)
	_, ok, _ = x.Lookup(1005)
	fmt.Println(ok) // before the first entry: scan from the segment's start
	// Output:
	// 1019 4200 true
	// false
}
