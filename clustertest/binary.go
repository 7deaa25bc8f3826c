package clustertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BinaryEnv names the environment variable that, when set, is the path of
// the spool binary to run instead of building one.
const BinaryEnv = "SPOOL_BIN"

// spoolModule is the module holding the command the cluster runs, and
// spoolCommand the command's directory in it.
const (
	spoolModule  = "github.com/spoolmq/spool"
	spoolCommand = "./cmd/spool"
)

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
// if set, else one built with "go build" into a temporary directory, once
// per test binary. It is built from the spool module the test's module
// uses (its directory in the module cache, or a replacement's or
// workspace's), with that module's own go.mod, so that a test in another
// module needs none of the command's dependencies. Build it yourself and
// set SPOOL_BIN to run tests of several packages against one binary, or to
// run one built with other flags.
//
// Under go test -race the binary is built with -race too. The built
// binary's directory stays until RemoveBinary is called: call it from
// TestMain (see Main) to leave nothing behind.
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
	build.once.Do(func() { build.path, build.err = buildBinary() })
	return build.path, build.err
}

// buildBinary builds the spool command into a new temporary directory.
func buildBinary() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w: set $%s or put the go command on PATH: %w", ErrNoBinary, BinaryEnv, err)
	}
	out, err := exec.Command(goTool, "list", "-m", "-f", "{{.Dir}}", spoolModule).Output()
	if err != nil {
		return "", fmt.Errorf("%w: go list -m %s: %w", ErrNoBinary, spoolModule, err)
	}
	moduleDir := strings.TrimSpace(string(out))
	if moduleDir == "" {
		return "", fmt.Errorf("%w: go list -m %s: the module is not downloaded (go mod download %s)", ErrNoBinary, spoolModule, spoolModule)
	}
	build.dir, err = os.MkdirTemp("", "spool-clustertest-")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoBinary, err)
	}
	path := filepath.Join(build.dir, "spool")
	args := []string{"build", "-o", path}
	if raceEnabled {
		// The servers run the same code the test exercises: a race
		// in them is as much a failure as one in the test.
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool, append(args, spoolCommand)...)
	cmd.Dir = moduleDir
	// The spool module's own go.mod decides, not a workspace around it.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: go build %s in %s: %w\n%s", ErrNoBinary, spoolCommand, moduleDir, err, out)
	}
	return path, nil
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
