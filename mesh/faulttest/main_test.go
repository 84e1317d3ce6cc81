//go:build linux

package faulttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The node binary is built once per test run, into a directory removed when
// the run ends.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
	took time.Duration
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// requireFaults skips the test unless the fault suite was asked for.
func requireFaults(t *testing.T) {
	t.Helper()
	if os.Getenv("LOCKMESH_FAULTS") != "1" {
		t.Skip("fault tests are opt-in: set LOCKMESH_FAULTS=1 to run them (they start lockmesh node processes; " +
			"the partition and slow-network scenarios also need root and iproute2)")
	}
}

// nodeBinary builds cmd/faultnode (once) and returns its path.
func nodeBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		start := time.Now()
		build.dir, build.err = os.MkdirTemp("", "lockmesh-faulttest-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "faultnode")
		args := []string{"build", "-o", build.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/lockmesh/lockmesh/mesh/faulttest/cmd/faultnode")
		// go test puts its own GOROOT/bin first on the PATH.
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
		build.took = time.Since(start)
	})
	if build.err != nil {
		t.Fatalf("building the node binary: %v", build.err)
	}
	return build.path
}
