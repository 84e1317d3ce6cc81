//go:build linux

package kubernetes

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The image the manifests run is built by cmd/lockmesh/Dockerfile. CI has
// no container runtime, so this test checks the Dockerfile without one: it
// runs the build stage's go build command as written, checks the binary is
// statically linked, starts it as the image's user for a short agent run,
// and checks what the final stage says (base, user, entrypoint, ports).

const (
	dockerfile = "../../cmd/lockmesh/Dockerfile"
	repoRoot   = "../.."
	// imageUID is the user the image runs as (distroless's nonroot), and the
	// manifests' runAsUser.
	imageUID = 65532
)

// allowedBases are the minimal final images: no shell, no package manager.
var allowedBases = []string{
	"gcr.io/distroless/static-debian12:nonroot",
	"gcr.io/distroless/static:nonroot",
	"scratch",
}

// stage is one FROM ... of a Dockerfile and its instructions.
type stage struct {
	from, name string
	instrs     []instr
}

type instr struct{ cmd, args string }

// parseDockerfile reads the instructions of a Dockerfile, stage by stage:
// comments dropped, continued lines joined.
func parseDockerfile(t *testing.T, path string) []*stage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []*stage
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur == "") {
			continue
		}
		if next, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur += next + " "
			continue
		}
		cur += trimmed
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur), " ")
		cur = ""
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		if cmd == "FROM" {
			f := strings.Fields(args)
			s := &stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %s before any FROM", path, cmd)
		}
		s := stages[len(stages)-1]
		s.instrs = append(s.instrs, instr{cmd, args})
	}
	if len(stages) < 2 {
		t.Fatalf("%s: %d stages, want a build stage and a final one", path, len(stages))
	}
	return stages
}

func (s *stage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func (s *stage) last(t *testing.T, cmd string) string {
	t.Helper()
	v := s.all(cmd)
	if len(v) == 0 {
		t.Fatalf("the stage FROM %s has no %s", s.from, cmd)
	}
	return v[len(v)-1]
}

// buildCommand is the build stage's RUN with go build in it, and the stage.
func buildCommand(t *testing.T, stages []*stage) (string, *stage) {
	t.Helper()
	for _, s := range stages[:len(stages)-1] {
		for _, run := range s.all("RUN") {
			if strings.Contains(run, "go build") {
				return run, s
			}
		}
	}
	t.Fatal("no build stage runs go build")
	return "", nil
}

// The Dockerfile's final stage: a minimal base, a non-root numeric user
// (Kubernetes' runAsNonRoot can only check a number), the binary as the
// entrypoint, the agent as the default command, the ports the manifests use.
func TestDockerfileFinalStage(t *testing.T) {
	stages := parseDockerfile(t, dockerfile)
	final := stages[len(stages)-1]
	if !slices.Contains(allowedBases, final.from) {
		t.Errorf("the final stage is FROM %s; want one of %v", final.from, allowedBases)
	}
	user := final.last(t, "USER")
	uid, gid, _ := strings.Cut(user, ":")
	if uid != strconv.Itoa(imageUID) || (gid != "" && gid != strconv.Itoa(imageUID)) {
		t.Errorf("USER %s; want %d:%d, the numeric non-root user the manifests run as", user, imageUID, imageUID)
	}
	if got := final.last(t, "ENTRYPOINT"); got != `["lockmesh"]` {
		t.Errorf(`ENTRYPOINT %s; want ["lockmesh"]: the manifests run "lockmesh agent"`, got)
	}
	if got := final.last(t, "CMD"); got != `["agent"]` {
		t.Errorf(`CMD %s; want ["agent"]`, got)
	}
	exposed := strings.Fields(strings.Join(final.all("EXPOSE"), " "))
	for _, p := range []string{"7946/tcp", "7946/udp", "7947/tcp", "8080/tcp", "8500/tcp"} {
		if !slices.Contains(exposed, p) {
			t.Errorf("EXPOSE lacks %s (has %v)", p, exposed)
		}
	}
	// The binary the build stage writes is the one the final stage copies,
	// into a directory on the base image's PATH.
	run, build := buildCommand(t, stages)
	out := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(run)
	if out == nil {
		t.Fatalf("the build command %q has no -o", run)
	}
	want := fmt.Sprintf("--from=%s %s /usr/local/bin/lockmesh", build.name, out[1])
	if !slices.Contains(final.all("COPY"), want) {
		t.Errorf("the final stage does not COPY %s (it has %q)", want, final.all("COPY"))
	}
}

// The build stage's Go is at least the one go.mod asks for.
func TestDockerfileGoVersion(t *testing.T) {
	_, build := buildCommand(t, parseDockerfile(t, dockerfile))
	m := regexp.MustCompile(`^golang:(\d+)\.(\d+)`).FindStringSubmatch(build.from)
	if m == nil {
		t.Fatalf("the build stage is FROM %s; want golang:MAJOR.MINOR...", build.from)
	}
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	d := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindSubmatch(mod)
	if d == nil {
		t.Fatal("go.mod has no go directive")
	}
	atoi := func(s []byte) int { n, _ := strconv.Atoi(string(s)); return n }
	img := [2]int{atoi([]byte(m[1])), atoi([]byte(m[2]))}
	need := [2]int{atoi(d[1]), atoi(d[2])}
	if img[0] < need[0] || (img[0] == need[0] && img[1] < need[1]) {
		t.Errorf("the build stage's Go is %d.%d; go.mod needs %d.%d", img[0], img[1], need[0], need[1])
	}
}

// The build stage's command, run as written (its output directory aside),
// gives a static binary that runs an agent as the image's user.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent: not with -short")
	}
	run, _ := buildCommand(t, parseDockerfile(t, dockerfile))
	for _, want := range []string{"CGO_ENABLED=0", "go build", "./cmd/lockmesh"} {
		if !strings.Contains(run, want) {
			t.Fatalf("the build command %q lacks %s", run, want)
		}
	}
	// A directory the image's user can enter and write (sockets).
	dir, err := os.MkdirTemp("", "lockmesh-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	out := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(run)[1]
	bin := filepath.Join(dir, "lockmesh")
	cmd := exec.Command("sh", "-c", strings.Replace(run, "-o "+out, "-o "+bin, 1))
	cmd.Dir = repoRoot // the image's build context: COPY . .
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", run, err, b)
	}
	t.Logf("built in %v: %s", time.Since(start).Round(time.Millisecond), run)

	checkStatic(t, bin)
	runAsImageUser(t, bin, dir)
}

// checkStatic: no program interpreter (the dynamic loader) and no shared
// library needed.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter (PT_INTERP): it is dynamically linked")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
}

// runAsImageUser starts a one-voter agent from bin as uid and gid 65532 (when
// the test runs as root, as CI does; otherwise as the test's user), waits
// until it is ready, asks its HTTP API for its health, and makes it leave.
func runAsImageUser(t *testing.T, bin, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "agent", "-name", "a", "-voters", "a", "-bind", "127.0.0.1:0",
		"-socket", filepath.Join(dir, "a.sock"), "-api-addr", "127.0.0.1:0", "-log-level", "warn")
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // nothing of the test's environment
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
	} else {
		t.Logf("not root: the agent runs as uid %d, not the image's %d", os.Geteuid(), imageUID)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	next := func(prefix string) string {
		t.Helper()
		if !lines.Scan() || !strings.HasPrefix(lines.Text(), prefix) {
			t.Fatalf("the agent printed %q, want %q...; stderr:\n%s", lines.Text(), prefix, stderr.String())
		}
		return lines.Text()
	}
	started := next("started ")
	if os.Geteuid() == 0 {
		if uid := procUID(t, cmd.Process.Pid); uid != imageUID {
			t.Errorf("the agent runs as uid %d, want %d", uid, imageUID)
		}
	}
	next("ready ")
	api := regexp.MustCompile(`api=(\S+)`).FindStringSubmatch(started)
	if api == nil {
		t.Fatalf("no api= on %q", started)
	}
	resp, err := http.Get(api[1] + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/v1/health: %s %s", resp.Status, body)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	next("left")
	if err := cmd.Wait(); err != nil {
		t.Errorf("the agent: %v; stderr:\n%s", err, stderr.String())
	}
}

// procUID is the real uid of process pid.
func procUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no Uid: in /proc/PID/status")
	}
	uid, _ := strconv.Atoi(string(m[1]))
	return uid
}
