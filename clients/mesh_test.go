//go:build linux

// Package clients_test runs the Python and Node clients' tests, and the
// curl session of docs/http-api.md, against agents started as processes on
// loopback: three voters for the clients, one for the curl session.
package clients_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	build struct {
		once sync.Once
		path string
		err  error
	}
	shared struct {
		once   sync.Once
		mesh   *testMesh
		err    error
		agents []*agent // every agent started, stopped by TestMain
		mu     sync.Mutex
	}
	// workDir holds the binary, the agents' sockets, data and logs; short,
	// for unix socket paths.
	workDir string
)

func TestMain(m *testing.M) {
	var err error
	if workDir, err = os.MkdirTemp("", "lmclients-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	shared.mu.Lock()
	for _, a := range shared.agents {
		a.stop()
	}
	shared.mu.Unlock()
	os.RemoveAll(workDir)
	os.Exit(code)
}

// binary builds cmd/lockmesh once per run (without -race: these tests are
// about the clients) and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.path = filepath.Join(workDir, "lockmesh")
		start := time.Now()
		out, err := exec.Command("go", "build", "-o", build.path, "github.com/lockmesh/lockmesh/cmd/lockmesh").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		fmt.Fprintf(os.Stderr, "clients_test: built the agent in %v\n", time.Since(start).Round(time.Millisecond))
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// agent is a running lockmesh agent.
type agent struct {
	name, gossip, api, apiSocket, log string
	cmd                               *exec.Cmd
	lines                             chan string
	exited                            chan struct{}
}

// startAgent starts `lockmesh agent` with args and waits for its "started"
// line; env is added to its environment.
func startAgent(t *testing.T, name string, env []string, args ...string) *agent {
	t.Helper()
	a := &agent{name: name, log: filepath.Join(workDir, name+".log"), lines: make(chan string, 16), exited: make(chan struct{})}
	logf, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	a.cmd = exec.Command(binary(t), append([]string{"agent"}, args...)...)
	a.cmd.Env = append(os.Environ(), env...)
	a.cmd.Stderr = logf
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	shared.mu.Lock()
	shared.agents = append(shared.agents, a)
	shared.mu.Unlock()
	go func() {
		defer close(a.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case a.lines <- sc.Text():
			default:
			}
		}
		a.cmd.Wait()
	}()
	line := a.next(t, "started ")
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "gossip":
			a.gossip = v
		case "api":
			a.api = v
		case "api-socket":
			a.apiSocket = v
		}
	}
	return a
}

// next waits for the agent's next stdout line, which must start with prefix.
func (a *agent) next(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l := <-a.lines:
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("agent %s printed %q, want %q...; log:\n%s", a.name, l, prefix, a.tail())
		}
		return l
	case <-a.exited:
		t.Fatalf("agent %s exited; log:\n%s", a.name, a.tail())
	case <-time.After(time.Minute):
		t.Fatalf("agent %s printed no %q line within a minute; log:\n%s", a.name, prefix, a.tail())
	}
	return ""
}

// stop makes the agent leave (SIGTERM) and waits for it to exit.
func (a *agent) stop() {
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
	}
}

func (a *agent) tail() string {
	b, _ := os.ReadFile(a.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// testMesh is three voters, a, b and c, serving the HTTP API on loopback
// with two tokens: admin, allowed everything, and worker, allowed to lock
// under jobs/ only.
type testMesh struct {
	agents                  []*agent
	adminToken, workerToken string
}

// env is what the clients' tests read (clients/python/README.md,
// clients/node/README.md).
func (m *testMesh) env() []string {
	var urls []string
	for _, a := range m.agents {
		urls = append(urls, a.api)
	}
	return []string{
		"LOCKMESH_TEST_URLS=" + strings.Join(urls, ","),
		"LOCKMESH_TEST_SOCKET=" + m.agents[0].apiSocket,
		"LOCKMESH_API_TOKEN=" + m.adminToken,
		"LOCKMESH_TEST_WORKER_TOKEN=" + m.workerToken,
		"LOCKMESH_TEST_NO_SKIP=1",
	}
}

// sharedMesh starts the three voters once per run.
func sharedMesh(t *testing.T) *testMesh {
	t.Helper()
	shared.once.Do(func() {
		shared.mesh, shared.err = startMesh(t)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	if shared.mesh == nil {
		t.Fatal("the shared mesh did not start (see the first test that tried)")
	}
	return shared.mesh
}

func startMesh(t *testing.T) (*testMesh, error) {
	m := &testMesh{adminToken: secret(), workerToken: secret()}
	cfg := map[string]any{
		"tokens": []map[string]any{
			{"name": "admin", "secret": m.adminToken, "rules": []map[string]any{{"prefix": "", "allow": []string{"admin"}}}},
			{"name": "worker", "secret": m.workerToken, "rules": []map[string]any{{"prefix": "jobs/", "allow": []string{"lock"}}}},
		},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(workDir, "agent.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	var seed string
	for _, name := range []string{"a", "b", "c"} {
		args := []string{"-name", name, "-voters", "a,b,c", "-bind", "127.0.0.1:0",
			// Leases of 2 s: a loaded machine does not miss renewals, and
			// expiries do not slow the tests.
			"-ttl", "2s",
			"-socket", filepath.Join(workDir, name+".sock"), "-api-socket", filepath.Join(workDir, name+"-http.sock"),
			"-api-addr", "127.0.0.1:0", "-config", cfgPath}
		if seed != "" {
			args = append(args, "-seeds", seed)
		}
		a := startAgent(t, name, nil, args...)
		m.agents = append(m.agents, a)
		seed = a.gossip
	}
	for _, a := range m.agents {
		a.next(t, "ready ")
	}
	return m, nil
}

func secret() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tool is the path of an interpreter the clients' tests need. Missing, the
// test fails on CI (CI=true: .ci/run installs it) and skips elsewhere.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; .ci/run installs it", name)
		}
		t.Skipf("%s is not installed: skipping (CI fails instead)", name)
	}
	return p
}

// interpreter is tool(t, name), at least version min (major, minor): the
// oldest the client supports. An older one fails on CI and skips elsewhere.
func interpreter(t *testing.T, name string, min [2]int, versionArgs ...string) string {
	t.Helper()
	p := tool(t, name)
	out, err := exec.Command(p, versionArgs...).Output()
	if err != nil {
		t.Fatalf("%s %q: %v", name, versionArgs, err)
	}
	v := strings.TrimSpace(string(out))
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("%s version %q: %v", name, v, err)
	}
	if major < min[0] || (major == min[0] && minor < min[1]) {
		msg := fmt.Sprintf("%s %s is older than %d.%d, the oldest the client supports", name, v, min[0], min[1])
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Logf("%s %s", name, v)
	return p
}

// repoRoot is the repository's top directory (the tests run in clients/).
func repoRoot(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return d
}
