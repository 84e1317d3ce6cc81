package main

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// election is the name the demo's candidates campaign for.
const election = "scheduler"

// elect: b observes an election while a and c campaign for it; the voters
// push each change of leader to b; a resigns and c, next in line, leads.
func (d *demo) elect() error {
	d.title("Leader election. Node b observes the election %q: the voters push each change of leader to it "+
		"(nothing is polled). a and c campaign, each publishing its address; a leads, resigns, and c leads next.", election)
	a, b, c := d.c.nodes["a"], d.c.nodes["b"], d.c.nodes["c"]
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	leaders, err := b.Observe(ctx, election)
	if err != nil {
		return fmt.Errorf("b: observing %q: %w", election, err)
	}
	// observe prints what b is told until it is told that node leads ("":
	// that nobody does), and returns that state.
	observe := func(node string, since time.Time, what string) (mesh.Leader, error) {
		for {
			select {
			case l, ok := <-leaders:
				if !ok {
					return l, fmt.Errorf("b's observation of %q ended", election)
				}
				d.say("b is told  %s  (%s after %s)", leaderLine(l), round(time.Since(since)), what)
				if (node == "" && !l.Held) || (l.Held && l.Node == node) {
					return l, nil
				}
			case <-ctx.Done():
				return mesh.Leader{}, fmt.Errorf("b was not told that %q leads %q: %w", node, election, ctx.Err())
			}
		}
	}
	if _, err := observe("", time.Now(), "it asked"); err != nil {
		return err
	}

	campaigned := time.Now()
	leadA, err := a.Campaign(ctx, election, []byte("a.example:8080"))
	if err != nil {
		return fmt.Errorf("a: campaigning: %w", err)
	}
	d.say("a campaigns and leads after %s, token %d", round(time.Since(campaigned)), leadA.Token())
	if _, err := observe("a", campaigned, "a campaigned"); err != nil {
		return err
	}

	type campaign struct {
		lead *mesh.Leadership
		err  error
		at   time.Time
	}
	next := make(chan campaign, 1)
	go func() {
		lead, err := c.Campaign(ctx, election, []byte("c.example:8080"))
		next <- campaign{lead, err, time.Now()}
	}()
	d.say("c campaigns too, and waits while a leads")
	resigned := time.Now()
	if err := leadA.Resign(ctx); err != nil {
		return fmt.Errorf("a: resigning: %w", err)
	}
	d.say("a resigns")
	seen, err := observe("c", resigned, "a resigned")
	if err != nil {
		return err
	}
	r := <-next
	if r.err != nil {
		return fmt.Errorf("c: campaigning: %w", r.err)
	}
	d.election = r.at.Sub(resigned)
	d.say("c leads %s after a resigned, token %d (a's was %d)", round(d.election), r.lead.Token(), leadA.Token())
	switch {
	case r.lead.Token() <= leadA.Token():
		return fmt.Errorf("c's leadership token %d is not above a's %d", r.lead.Token(), leadA.Token())
	case seen.Token != r.lead.Token():
		return fmt.Errorf("b was told of token %d, c leads under %d", seen.Token, r.lead.Token())
	}
	resigned = time.Now()
	if err := r.lead.Resign(ctx); err != nil {
		return fmt.Errorf("c: resigning: %w", err)
	}
	d.say("c resigns")
	_, err = observe("", resigned, "c resigned")
	return err
}

// leaderLine describes an election's state as lockmesh elect -listen does.
func leaderLine(l mesh.Leader) string {
	if !l.Held {
		return fmt.Sprintf("%s: no leader", l.Name)
	}
	return fmt.Sprintf("%s: %s (node %s, token %d)", l.Name, l.Value, l.Node, l.Token)
}
