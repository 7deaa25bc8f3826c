package clustertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// BinaryEnv names the environment variable that, when set, is the path of
// the spool binary to run instead of building one.
const BinaryEnv = "SPOOL_BIN"

// spoolPackage is the import path of the command the cluster runs.
const spoolPackage = "github.com/spoolmq/spool/cmd/spool"

// The binary is built at most once per test binary: building links a
// 15 MB executable, which on a small CI machine costs seconds.
var build struct {
	once sync.Once
	dir  string // the temporary directory holding the built binary
	path string
	err  error
}

// ErrNoBinary reports that there is no spool binary to run: BinaryEnv
// names a file that is not there, or building one failed.
var ErrNoBinary = errors.New("clustertest: no spool binary")

// Binary returns the path of the spool binary the clusters run: $SPOOL_BIN
// if set, else one built with "go build" from the module the test runs in
// (so the spool version its go.mod requires) into a temporary directory,
// once per test binary. Build it yourself and set SPOOL_BIN to run tests
// of several packages against one binary, or to run a binary built with
// other flags (-race).
//
// The built binary's directory stays until RemoveBinary is called: call it
// from TestMain (see Main) to leave nothing behind.
func Binary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%w: $%s: %w", ErrNoBinary, BinaryEnv, err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: $%s=%s is not an executable file", ErrNoBinary, BinaryEnv, p)
		}
		return p, nil
	}
	build.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			build.err = fmt.Errorf("%w: set $%s or put the go command on PATH: %w", ErrNoBinary, BinaryEnv, err)
			return
		}
		build.dir, err = os.MkdirTemp("", "spool-clustertest-")
		if err != nil {
			build.err = fmt.Errorf("%w: %w", ErrNoBinary, err)
			return
		}
		build.path = filepath.Join(build.dir, "spool")
		args := []string{"build", "-o", build.path}
		if raceEnabled {
			// The servers run the same code the test exercises: a race
			// in them is as much a failure as one in the test.
			args = append(args, "-race")
		}
		out, err := exec.Command(goTool, append(args, spoolPackage)...).CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("%w: go build %s: %w\n%s", ErrNoBinary, spoolPackage, err, out)
		}
	})
	return build.path, build.err
}

// RemoveBinary removes the binary Binary built, if it built one. Call it
// after the last test that starts a cluster, from TestMain.
func RemoveBinary() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// TestingM is what Main needs of *testing.M.
type TestingM interface{ Run() int }

// Main runs the tests of m and removes the binary built for them. Use it
// as a package's TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
func Main(m TestingM) int {
	code := m.Run()
	RemoveBinary()
	return code
}
