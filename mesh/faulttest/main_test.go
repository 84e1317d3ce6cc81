//go:build linux

package faulttest

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// oldNodeBinary builds cmd/faultnode as it was at commit previous (once),
// into the build directory, and returns its path. The source comes from
// git history (git archive: nothing of the repository changes); the
// modules from the module cache, or the proxy, as for any build. The test
// skips, saying why, when the commit is not in this clone's history (a
// shallow clone: .ci/run deepens it).
func oldNodeBinary(t *testing.T) string {
	t.Helper()
	nodeBinary(t) // the build directory
	oldBuild.once.Do(func() {
		start := time.Now()
		defer func() { oldBuild.took = time.Since(start) }()
		if err := exec.Command("git", "cat-file", "-e", previous+"^{commit}").Run(); err != nil {
			oldBuild.skip = fmt.Errorf("commit %s (the previous release) is not in this clone's history (git cat-file: %v); "+
				"run git fetch --unshallow, as .ci/run does", previous, err)
			return
		}
		top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			oldBuild.err = fmt.Errorf("git rev-parse --show-toplevel: %v", err)
			return
		}
		src := filepath.Join(build.dir, "src-"+previous)
		if err := os.MkdirAll(src, 0o755); err != nil {
			oldBuild.err = err
			return
		}
		archive := exec.Command("git", "archive", "--format=tar", previous)
		archive.Dir = strings.TrimSpace(string(top)) // in a subdirectory, git archive takes only its subtree
		tarball, err := archive.StdoutPipe()
		if err != nil {
			oldBuild.err = err
			return
		}
		var stderr strings.Builder
		archive.Stderr = &stderr
		if err := archive.Start(); err != nil {
			oldBuild.err = err
			return
		}
		xerr := untar(tarball, src)
		if err := archive.Wait(); err != nil || xerr != nil {
			oldBuild.err = fmt.Errorf("git archive %s: %v %v\n%s", previous, err, xerr, stderr.String())
			return
		}
		oldBuild.path = filepath.Join(build.dir, "faultnode-"+previous)
		args := []string{"build", "-o", oldBuild.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./mesh/faulttest/cmd/faultnode")
		cmd := exec.Command("go", args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			oldBuild.err = fmt.Errorf("go %v (in the tree of %s): %v\n%s", args, previous, err, out)
		}
	})
	if oldBuild.skip != nil {
		t.Skip(oldBuild.skip)
	}
	if oldBuild.err != nil {
		t.Fatalf("building the node binary of %s: %v", previous, oldBuild.err)
	}
	return oldBuild.path
}

// untar extracts the regular files and directories of a tar stream into
// dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("tar entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// previous is the commit whose faultnode the upgrade scenario starts from:
// the last release before protocol version 2 (wire.Version1's format).
const previous = "4de5f7e"

// The previous release's node binary, built from git history once per test
// run.
var oldBuild struct {
	once      sync.Once
	path      string
	skip, err error
	took      time.Duration
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
