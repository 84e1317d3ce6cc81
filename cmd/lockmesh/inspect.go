package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The read-only commands, and voters. Each asks the local agent once and
// prints the answer: text for people, or JSON (-json) for scripts.

const inspectExit = `
exit status: 0 on an answer; 64 usage; 69 the agent could not be reached,
or no majority of the voters answered in time`

// query dials the agent, asks req and returns the answer.
func query(socket string, timeout time.Duration, req request) (reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	cl, err := dial(ctx, socket)
	if err != nil {
		return reply{}, err
	}
	defer cl.close()
	req.Timeout = int64(timeout)
	r, err := cl.call(ctx, req)
	if err != nil {
		return r, failAPI(req.Op, err)
	}
	return r, nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func holderCommand() *command {
	c := newCommand("holder", "KEY", "say who holds a lock", `
Asks a majority of the voters who holds KEY (a linearizable read) and
prints "KEY: held by NODE, token T", or "KEY: free" and the last token
granted, if any. With -json it prints the answer as a JSON object.`+inspectExit)
	c.interspersed = true
	socket := c.socketFlag()
	timeout := c.fs.Duration("timeout", defaultTimeout, "how long to wait for a majority's answer")
	asJSON := c.fs.Bool("json", false, "print JSON")
	c.run = func(args []string) error {
		if len(args) != 1 {
			return c.usageError("want one KEY")
		}
		r, err := query(*socket, *timeout, request{Op: opHolder, Key: args[0]})
		if err != nil {
			return err
		}
		h := *r.Holder
		switch {
		case *asJSON:
			return printJSON(h)
		case h.Held && len(h.Value) > 0:
			fmt.Printf("%s: held by %s, token %d, value %q\n", h.Key, h.Node, h.Token, h.Value)
		case h.Held:
			fmt.Printf("%s: held by %s, token %d\n", h.Key, h.Node, h.Token)
		case h.Token != 0:
			fmt.Printf("%s: free (last token %d)\n", h.Key, h.Token)
		default:
			fmt.Printf("%s: free\n", h.Key)
		}
		return nil
	}
	return c
}

func locksCommand() *command {
	c := newCommand("locks", "[PREFIX]", "list the locks held", `
Lists the locks held now whose keys start with PREFIX (all when none),
mesh-wide, as a majority of the voters holds them: one line per lock,
"KEY NODE TOKEN TIME-LEFT VALUE" (the value quoted, when there is one).
An election is the lock of its name; a semaphore's slots are NAME#0 to
NAME#(N-1). With -json a JSON array.`+inspectExit+`; 65 not supported
(an agent of an earlier release, or an upgrade in progress)`)
	c.interspersed = true
	socket := c.socketFlag()
	timeout := c.fs.Duration("timeout", defaultTimeout, "how long to wait for the answer")
	asJSON := c.fs.Bool("json", false, "print JSON")
	c.run = func(args []string) error {
		if len(args) > 1 {
			return c.usageError("want at most one PREFIX")
		}
		prefix := ""
		if len(args) == 1 {
			prefix = args[0]
		}
		r, err := query(*socket, *timeout, request{Op: opLocks, Key: prefix})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(r.Locks)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
		for _, h := range r.Locks {
			value := ""
			if len(h.Value) > 0 {
				value = strconv.Quote(string(h.Value))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\n", h.Key, h.Node, h.Token, h.TimeLeft.Round(time.Millisecond), value)
		}
		return tw.Flush()
	}
	return c
}

func statusCommand() *command {
	c := newCommand("status", "", "show the local agent's view of the mesh", `
Prints the local agent's node: whether it is ready and, if not, what it
waits for; its addresses, whether it votes, the voter configuration and
the voters known live, the leases it holds; each voter as this node's
probes find it (live or why not, its voting state, when it last
answered); and the members as gossip shows them (gossip takes seconds
longer to mark a stopped node dead). With -json, the whole mesh.Status.`+inspectExit)
	c.interspersed = true
	socket := c.socketFlag()
	asJSON := c.fs.Bool("json", false, "print JSON")
	c.run = func(args []string) error {
		if len(args) != 0 {
			return c.usageError("takes no arguments")
		}
		r, err := query(*socket, defaultTimeout, request{Op: opStatus})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(r.Status)
		}
		printStatus(os.Stdout, *r.Status)
		return nil
	}
	return c
}

// printStatus writes st for people: the node and what it waits for, the
// voters as its probes find them (what readiness counts), and the members
// as gossip shows them, which is slower to see a node fail.
func printStatus(w io.Writer, st mesh.Status) {
	ready := "ready"
	if !st.Ready {
		ready = "not ready"
	}
	voting := st.VotingState.String()
	if st.VotingState == mesh.NotVoter {
		voting = "not a voter"
	}
	fmt.Fprintf(w, "node:    %s (%s)\n", st.Name, ready)
	if why := st.Waiting.String(); why != "" {
		fmt.Fprintf(w, "waiting: %s\n", why)
	}
	fmt.Fprintf(w, "gossip:  %s\nballots: %s\n", st.Addr, st.RPCAddr)
	fmt.Fprintf(w, "voting:  %s\n", voting)
	if len(st.Voters) == 0 {
		fmt.Fprintf(w, "voters:  none known yet\n")
	} else {
		fmt.Fprintf(w, "voters:  %s (version %d%s); live: %s\n", strings.Join(st.Voters, ", "), st.Config.Version,
			pendingNote(st.Config), listOrNone(st.LiveVoters))
	}
	fmt.Fprintf(w, "leases:  %d\n", st.Leases)
	if len(st.VoterHealth) > 0 {
		fmt.Fprintf(w, "\nvoters, as this node's probes find them:\n")
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "  NAME\tLIVE\tSTATE\tANSWERED\tNOTE\n")
		for _, v := range st.VoterHealth {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", v.Name, yesNo(v.Live), orDash(v.State), answered(v), voterNote(v))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nmembers, as gossip shows them:\n")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tGOSSIP\tVOTER\tGOSSIP ADDR\tBALLOTS\n")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Name, m.State, yesNo(m.Voter), m.Addr, m.RPCAddr)
	}
	tw.Flush()
}

// answered says how long ago a voter last answered this node's probe.
func answered(v mesh.VoterHealth) string {
	switch {
	case v.Self:
		return "-"
	case v.Answered == 0:
		return "never"
	}
	return v.Answered.Round(10*time.Millisecond).String() + " ago"
}

// voterNote is what else a voter's line says: this node, why it is not
// known live, why the last probe failed.
func voterNote(v mesh.VoterHealth) string {
	var notes []string
	if v.Self {
		notes = append(notes, "this node")
	}
	if v.Why != "" && v.Why != v.State {
		notes = append(notes, v.Why)
	}
	if v.ProbeError != "" {
		notes = append(notes, "last probe failed: "+v.ProbeError)
	}
	return strings.Join(notes, "; ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func pendingNote(c mesh.Configuration) string {
	if c.Pending {
		return ", a change pending from " + strings.Join(c.Previous, ", ")
	}
	return ""
}

func votersCommand() *command {
	c := newCommand("voters", "list | add NODE | remove NODE", "list or change the voters", `
list prints the voter configuration the local agent knows: one voter per
line, then its version, and the removed (retired) names if any.

add makes NODE (running and joined) a voter; remove takes NODE out of the
voters, alive or gone for good (its name never votes again). Both return
once the change is in effect, and print the new configuration. To replace a
dead voter, add the new one first, then remove the dead one.`+inspectExit+`;
1 the change was refused (an unknown node, a retired name, the last voter,
another change running on that agent)`)
	c.interspersed = true
	socket := c.socketFlag()
	timeout := c.fs.Duration("timeout", changeTimeout, "how long add and remove may take")
	asJSON := c.fs.Bool("json", false, "print JSON")
	c.run = func(args []string) error {
		var req request
		switch {
		case len(args) == 1 && args[0] == "list":
			req.Op = opVoters
		case len(args) == 2 && args[0] == "add":
			req.Op, req.Name = opAddVoter, args[1]
		case len(args) == 2 && args[0] == "remove":
			req.Op, req.Name = opRemoveVoter, args[1]
		default:
			return c.usageError("want list, add NODE or remove NODE")
		}
		r, err := query(*socket, *timeout, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(r.Config)
		}
		cfg := r.Config
		for _, v := range cfg.Voters {
			fmt.Println(v)
		}
		fmt.Printf("# version %d%s\n", cfg.Version, pendingNote(*cfg))
		if len(cfg.Retired) > 0 {
			fmt.Printf("# retired: %s\n", strings.Join(cfg.Retired, ", "))
		}
		return nil
	}
	return c
}
