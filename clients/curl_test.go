//go:build linux

package clients_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The curl session of docs/http-api.md, run as written against the agent
// its text starts: every command in one shell, each answer compared with
// the one the document shows. Ids, tokens, indexes and times differ from
// run to run; every other field, and the set of fields, must be the same.

const curlDoc = "docs/http-api.md"

// volatile fields differ from run to run; detail is compared with its
// numbers and hex ids blanked.
var volatile = map[string]bool{
	"id": true, "session": true, "token": true, "index": true, "deadline": true, "created": true,
	"remaining_ms": true, "session_remaining_ms": true, "valid_ms": true,
}

var idsAndNumbers = regexp.MustCompile(`[0-9a-f]{16,}|[0-9]+`)

func TestCurlSession(t *testing.T) {
	bash, _ := tool(t, "bash"), tool(t, "curl")
	tool(t, "jq")
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), curlDoc))
	if err != nil {
		t.Fatal(err)
	}
	agentArgs, steps := curlSession(t, string(doc))

	// The agent as the document starts it, on ports of our choosing (the
	// document's may be taken), with its default sockets in a directory of
	// the test's.
	dir, err := os.MkdirTemp(workDir, "curl-")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "demo-http.sock")
	var args []string
	for _, a := range agentArgs {
		switch a {
		case "127.0.0.1:7946", "127.0.0.1:8500":
			a = "127.0.0.1:0"
		case "/tmp/lockmesh-demo-http.sock":
			a = socket
		}
		args = append(args, a)
	}
	a := startAgent(t, "curl-demo", []string{"XDG_RUNTIME_DIR=" + dir}, args...)
	defer a.stop()
	api := strings.TrimPrefix(a.api, "http://")
	if a.apiSocket != socket {
		t.Fatalf("the agent's socket is %s, want %s", a.apiSocket, socket)
	}

	// One shell for every step, a marker line before each step's output.
	var script strings.Builder
	for i, s := range steps {
		cmd := strings.NewReplacer("localhost:8500", api, "/tmp/lockmesh-demo-http.sock", socket).Replace(s.cmd)
		fmt.Fprintf(&script, "printf '\\n@@step %d\\n'\n%s\n", i, cmd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, bash, "-c", script.String())
	var stderr bytes.Buffer
	sh.Stderr = &stderr
	out, err := sh.Output()
	if err != nil {
		t.Fatalf("the session: %v\n%s\n%s", err, out, stderr.String())
	}
	got := strings.Split(string(out), "\n@@step ")[1:]
	if len(got) != len(steps) {
		t.Fatalf("%d steps ran, want %d:\n%s", len(got), len(steps), out)
	}
	for i, s := range steps {
		_, answer, _ := strings.Cut(got[i], "\n")
		if err := sameAnswer(s.want, strings.TrimSpace(answer)); err != nil {
			t.Errorf("$ %s\n got: %s\nwant: %s\n%v", s.cmd, strings.TrimSpace(answer), s.want, err)
		}
	}
}

// step is a command of the session and the answer the document shows.
type step struct{ cmd, want string }

// curlSession finds, in the "A session with curl" section of the document,
// the agent's command line and the session's steps.
func curlSession(t *testing.T, doc string) (agentArgs []string, steps []step) {
	t.Helper()
	_, sec, ok := strings.Cut(doc, "\n## A session with curl\n")
	if !ok {
		t.Fatalf("%s has no section \"A session with curl\"", curlDoc)
	}
	m := regexp.MustCompile("`(lockmesh agent [^`]+)`").FindStringSubmatch(sec)
	if m == nil {
		t.Fatalf("%s: no `lockmesh agent ...` before the session", curlDoc)
	}
	agentArgs = strings.Fields(m[1])[2:]
	_, block, ok := strings.Cut(sec, "```console\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: no console block in the curl session", curlDoc)
	}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, step{cmd: cmd})
		} else if len(steps) > 0 && steps[len(steps)-1].want == "" {
			steps[len(steps)-1].want = line
		} else {
			t.Fatalf("%s: %q: an answer of more than one line, or before any command", curlDoc, line)
		}
	}
	if len(steps) < 10 {
		t.Fatalf("%s: only %d steps in the curl session", curlDoc, len(steps))
	}
	return agentArgs, steps
}

// sameAnswer compares an answer with the document's: the same text, or
// JSON with the same fields and values but for the volatile ones.
func sameAnswer(want, got string) error {
	var w, g any
	if json.Unmarshal([]byte(want), &w) != nil {
		if want != got {
			return fmt.Errorf("not the text the document shows")
		}
		return nil
	}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if !reflect.DeepEqual(stable(w), stable(g)) {
		return fmt.Errorf("fields differ (volatile ones aside)")
	}
	return nil
}

// stable is v with the volatile fields' values blanked, and details with
// their numbers and ids blanked.
func stable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			switch {
			case volatile[k]:
				out[k] = "*"
			case k == "detail":
				out[k] = idsAndNumbers.ReplaceAllString(fmt.Sprint(e), "#")
			default:
				out[k] = stable(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = stable(e)
		}
		return out
	}
	return v
}
