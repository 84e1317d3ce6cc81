package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// What elect and locks need from the mesh: interfaces, so that the agent's
// protocol can be tested against fakes; meshapi.go implements them on
// package mesh.

// electionAPI runs elections: one leader per name, chosen by lease.
type electionAPI interface {
	// Campaign returns once this node leads the election name with
	// value, or ctx ends (errors as for mesh.Mesh.Acquire).
	Campaign(ctx context.Context, name, value string, ttl time.Duration) (leadership, error)
	// Observe sends the election's leader now and at every change, until
	// ctx ends; then it closes the channel.
	Observe(ctx context.Context, name string) (<-chan leaderInfo, error)
}

// leadership is a won election, held like a lease.
type leadership interface {
	Leader() leaderInfo
	// Done closes when leadership ends: resigned, or lost (Err says).
	Done() <-chan struct{}
	Err() error
	Resign(ctx context.Context) error
}

// leaderInfo is an election's leader, or none (Node empty).
type leaderInfo struct {
	Name  string `json:"name"`
	Node  string `json:"node,omitempty"`
	Value string `json:"value,omitempty"`
	Token uint64 `json:"token,omitempty"`
}

// locksAPI lists the locks held now.
type locksAPI interface {
	// Locks returns the held locks whose keys start with prefix.
	Locks(ctx context.Context, prefix string) ([]mesh.Holder, error)
}

const electHelp = `
Without -listen: campaigns for the election NAME with VALUE through the
local agent, prints the leader line once elected, and stays leader until
interrupted (SIGINT, SIGTERM: it resigns and exits 0) or until leadership
is lost (exit 76). With -listen NAME: prints the leader, and each change of
leader, until interrupted (like "etcdctl elect -l"): the voters push each
change to the agent as it happens (nothing is polled), and every leader is
printed in order, a slow reader getting the latest.

A leader line is "NAME: VALUE (node N, token T)", or "NAME: no leader";
with -json, one JSON object per line. The token is the leadership's
fencing token: higher for every new leader.

exit status: 0 after resigning or when -listen is interrupted; 64 usage;
65 not supported: an agent of an earlier release, or a node of the mesh
still on an earlier protocol version (finish the upgrade); 69 agent
unreachable or no quorum; 75 not elected within -timeout; 76 leadership
lost, or the agent lost.`

func electCommand() *command {
	c := newCommand("elect", "NAME VALUE | -listen NAME", "campaign for leadership, or watch who leads", electHelp)
	c.interspersed = true
	socket := c.socketFlag()
	listen := c.fs.Bool("listen", false, "observe the election instead of campaigning")
	ttl := c.fs.Duration("ttl", 0, "leadership lease TTL (default: the agent's)")
	timeout := c.fs.Duration("timeout", 0, "give up when not elected within this long (0: wait for ever)")
	asJSON := c.fs.Bool("json", false, "print leader lines as JSON")
	c.run = func(args []string) error {
		switch {
		case *listen && len(args) != 1:
			return c.usageError("-listen takes one argument, NAME")
		case !*listen && len(args) != 2:
			return c.usageError("want NAME VALUE, or -listen NAME")
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		cl, err := dial(ctx, *socket)
		if err != nil {
			return err
		}
		defer cl.close()
		p := leaderPrinter{json: *asJSON}
		if *listen {
			return observe(ctx, cl, args[0], p)
		}
		return campaign(ctx, cl, request{Op: opCampaign, Name: args[0], Value: args[1], TTL: int64(*ttl), Timeout: int64(*timeout)}, p)
	}
	return c
}

// campaign wins the election and holds it until ctx ends (resign, exit 0)
// or leadership or the agent is lost.
func campaign(ctx context.Context, cl *client, req request, p leaderPrinter) error {
	r, err := cl.call(ctx, req)
	if err != nil {
		return failAPI("campaign", err)
	}
	if r.Leader != nil {
		p.print(*r.Leader)
	}
	// The agent drops a candidacy whose client stays silent for a TTL.
	beat := pingEvery(time.Duration(r.TTL))
	if r.TTL == 0 {
		beat = time.Second // an agent of an earlier release: it needs none
	}
	go heartbeat(ctx, cl, beat)
	return lead(ctx, cl, req.Name)
}

// heartbeat sends a request every interval until ctx or the connection
// ends.
func heartbeat(ctx context.Context, cl *client, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cl.done:
			return
		case <-tk.C:
			hctx, cancel := context.WithTimeout(ctx, every)
			cl.call(hctx, request{Op: opHeartbeat}) // an old agent's "unknown operation" is fine
			cancel()
		}
	}
}

// lead holds the connection's leadership of election name until ctx ends
// (it then resigns) or leadership or the agent is lost.
func lead(ctx context.Context, cl *client, name string) error {
	select {
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		if _, err := cl.call(rctx, request{Op: opResign}); err != nil {
			return failAPI("resign", err)
		}
		return nil
	case ev := <-cl.events:
		return fail(exitLost, "leadership of %q lost: %s", name, ev.Message)
	case <-cl.done:
		return fail(exitLost, "leadership of %q: lost the agent: %v", name, cl.err)
	}
}

// observe prints the leader at every change until ctx ends.
func observe(ctx context.Context, cl *client, name string, p leaderPrinter) error {
	if _, err := cl.call(ctx, request{Op: opObserve, Name: name}); err != nil {
		return failAPI("observe", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-cl.events:
			if ev.Leader != nil {
				p.print(*ev.Leader)
			}
		case <-cl.done:
			return fail(exitUnavailable, "observing %q: lost the agent: %v", name, cl.err)
		}
	}
}

type leaderPrinter struct{ json bool }

func (p leaderPrinter) print(l leaderInfo) {
	switch {
	case p.json:
		b, _ := json.Marshal(l)
		fmt.Printf("%s\n", b)
	case l.Node == "":
		fmt.Printf("%s: no leader\n", l.Name)
	default:
		fmt.Printf("%s: %s (node %s, token %d)\n", l.Name, l.Value, l.Node, l.Token)
	}
}
