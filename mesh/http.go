package mesh

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// HTTPHandler serves a node's health, readiness and status over HTTP, for
// probes (Kubernetes, load balancers) and people:
//
//	GET /healthz  200 "ok" while the mesh runs; 503 once it is shut down or
//	              leaving. (/livez is the same.) For liveness probes: it
//	              never depends on other nodes.
//	GET /readyz   200 "ok" when the node is ready (Status.Ready); otherwise
//	              503 and "not ready: " with what it waits for. With
//	              ?verbose, one line per check, "[+]name ok" or
//	              "[-]name failed: reason", as the Kubernetes API server
//	              writes them. For readiness probes and rolling restarts.
//	GET /status   the node's Status as indented JSON.
//
// Answers are plain text (JSON for /status) and never cached; other paths
// are 404, other methods than GET and HEAD 405. It does not serve metrics:
// mount the Prometheus collector (Mesh.Collector) beside it, for example
//
//	mux := http.NewServeMux()
//	mux.Handle("/", mesh.HTTPHandler(m))
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m.Collector())
//	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// To serve it under a prefix, wrap it in http.StripPrefix.
func HTTPHandler(m *Mesh) http.Handler { return httpHandler{m} }

type httpHandler struct{ m *Mesh }

func (h httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	_, verbose := r.URL.Query()["verbose"]
	switch r.URL.Path {
	case "/healthz", "/livez":
		writeChecks(w, r.URL.Path[1:], h.health(), verbose)
	case "/readyz":
		writeChecks(w, "readyz", readyChecks(h.m.Status()), verbose)
	case "/status":
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(h.m.Status())
	default:
		http.NotFound(w, r)
	}
}

// check is one line of /readyz?verbose.
type check struct {
	name string
	ok   bool
	why  string // when failed
}

func (h httpHandler) health() []check {
	switch {
	case h.m.isClosed():
		return []check{{name: "mesh", why: "shut down"}}
	case h.m.leaving.Load():
		return []check{{name: "mesh", why: "leaving"}}
	}
	return []check{{name: "mesh", ok: true}}
}

// readyChecks are the checks behind st.Ready, in the order a node passes
// them.
func readyChecks(st Status) []check {
	w := st.Waiting
	if w.Configuration {
		return []check{{name: "configuration", why: "no voter configuration yet"}}
	}
	cs := []check{{name: "configuration", ok: true}}
	vote := check{name: "vote", ok: true}
	switch st.VotingState {
	case NotVoter:
		vote.why = "not a voter"
	case Live:
	case Quarantined:
		vote.ok, vote.why = false, "quarantined"
		if w.Quarantine > 0 {
			vote.why = fmt.Sprintf("quarantined for %v more", w.Quarantine.Round(time.Millisecond))
		}
	case CatchingUp:
		vote.ok, vote.why = false, "catching up"
		if w.Quarantine > 0 {
			vote.why += fmt.Sprintf(", waiting out a longer lease for %v more", w.Quarantine.Round(time.Millisecond))
		}
		if len(w.CatchUp) > 0 {
			vote.why += ", waiting for " + strings.Join(w.CatchUp, ", ")
		}
		if len(w.NeverVoted) > 0 {
			vote.why = "new data directory: waiting for " + strings.Join(w.NeverVoted, ", ") + " to say whether they ever voted"
		}
		if len(w.Recovering) > 0 {
			vote.why += ", recovering too: " + strings.Join(w.Recovering, ", ")
		}
		if w.NewerConfig != 0 {
			vote.why += "; " + w.newerConfig()
		}
	case Silenced:
		vote.ok, vote.why = false, "silenced: an earlier process with this node's name still answers"
	default:
		vote.ok, vote.why = false, st.VotingState.String()
	}
	cs = append(cs, vote)
	q := check{name: "quorum", ok: len(w.Voters) == 0,
		why: fmt.Sprintf("voters known live: %s", strings.Join(st.LiveVoters, ", "))}
	if !q.ok {
		parts := make([]string, len(w.Voters))
		for i, v := range w.Voters {
			parts[i] = v.Name + " " + v.Why
		}
		q.why = fmt.Sprintf("no majority of voters known live (live: %s; not: %s)",
			orNone(strings.Join(st.LiveVoters, ", ")), strings.Join(parts, ", "))
	}
	cs = append(cs, q)
	for _, mm := range w.Mismatches {
		// Listed, not failed: a mismatched voter already fails the quorum
		// check; a mismatched non-voter does not keep the node from
		// serving.
		cs = append(cs, check{name: "mismatch " + mm.Peer, ok: true,
			why: fmt.Sprintf("%s: ours %s, theirs %s", mm.What, mm.Ours, mm.Theirs)})
	}
	if !st.Ready && !failed(cs) {
		// Ready is the truth (it also covers a node shut down, or a state
		// that changed between two reads): never answer 200 when it says
		// no.
		cs = append(cs, check{name: "ready", why: "not ready"})
	}
	return cs
}

func failed(cs []check) bool {
	for _, c := range cs {
		if !c.ok {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// writeChecks answers a probe of what ("readyz", "healthz"): 200 and "ok"
// when every check passed, 503 and the failures' reasons otherwise; with
// verbose, every check, one a line.
func writeChecks(w http.ResponseWriter, what string, cs []check, verbose bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	bad := failed(cs)
	if bad {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if !verbose {
		if !bad {
			fmt.Fprintln(w, "ok")
			return
		}
		var reasons []string
		for _, c := range cs {
			if !c.ok {
				reasons = append(reasons, c.why)
			}
		}
		word := "not ready"
		if what != "readyz" {
			word = "unhealthy"
		}
		fmt.Fprintf(w, "%s: %s\n", word, strings.Join(reasons, "; "))
		return
	}
	for _, c := range cs {
		switch {
		case !c.ok:
			fmt.Fprintf(w, "[-]%s failed: %s\n", c.name, c.why)
		case c.why != "":
			fmt.Fprintf(w, "[+]%s ok (%s)\n", c.name, c.why)
		default:
			fmt.Fprintf(w, "[+]%s ok\n", c.name)
		}
	}
	if bad {
		fmt.Fprintf(w, "%s check failed\n", what)
	} else {
		fmt.Fprintf(w, "%s check passed\n", what)
	}
}
