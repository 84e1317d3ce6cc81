//go:build linux

package clients_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The suites run one after the other, not in parallel: their tests tell
// that a client waits on its agent by the agent's count of waiting
// requests, which the other suite's long-polls would move.

// suiteTimeout bounds one language's test suite.
const suiteTimeout = 3 * time.Minute

// TestPythonClient runs clients/python/tests against the three voters.
func TestPythonClient(t *testing.T) {
	py := interpreter(t, "python3", [2]int{3, 9}, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])")
	m := sharedMesh(t)
	runSuite(t, m, filepath.Join(repoRoot(t), "clients", "python"),
		py, "-m", "unittest", "discover", "-s", "tests", "-v")
}

// TestNodeClient runs clients/node/test against the three voters.
func TestNodeClient(t *testing.T) {
	node := interpreter(t, "node", [2]int{18, 0}, "-p", "process.versions.node")
	m := sharedMesh(t)
	dir := filepath.Join(repoRoot(t), "clients", "node")
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Node tests in %s/test (%v)", dir, err)
	}
	// Files by name, not a directory: Node 18 and 20 read a directory
	// argument differently from Node 22.
	for i, f := range files {
		files[i], _ = filepath.Rel(dir, f)
	}
	runSuite(t, m, dir, node, append([]string{"--test"}, files...)...)
}

// runSuite runs a client's test command in dir with the mesh's addresses
// in its environment, and fails with its output if it fails.
func runSuite(t *testing.T, m *testMesh, dir, name string, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), m.env()...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(100 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not end within %v:\n%s", name, strings.Join(args, " "), suiteTimeout, out)
	}
	if err != nil {
		var logs strings.Builder
		for _, a := range m.agents {
			logs.WriteString("--- agent " + a.name + "\n" + a.tail())
		}
		t.Fatalf("%s %s: %v (after %v)\n%s\nthe agents' logs:\n%s", name, strings.Join(args, " "), err, took, out, logs.String())
	}
	t.Logf("%s %s passed in %v", filepath.Base(name), strings.Join(args, " "), took)
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}
