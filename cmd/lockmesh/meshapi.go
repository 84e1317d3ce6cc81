package main

import (
	"context"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The agent's elections and lock listing, on package mesh's Campaign,
// Observe and Locks.

func meshElections(m *mesh.Mesh) electionAPI { return meshElection{m} }
func meshLocks(m *mesh.Mesh) locksAPI        { return m }

type meshElection struct{ m *mesh.Mesh }

func (e meshElection) Campaign(ctx context.Context, name, value string, ttl time.Duration) (leadership, error) {
	var opts []mesh.AcquireOption
	if ttl > 0 {
		opts = append(opts, mesh.WithTTL(ttl))
	}
	// Candidates of one agent wait for each other as for other nodes'.
	opts = append(opts, mesh.WaitBehindOwnLease())
	lead, err := e.m.Campaign(ctx, name, []byte(value), opts...)
	if err != nil {
		return nil, err
	}
	return meshLeadership{lead}, nil
}

func (e meshElection) Observe(ctx context.Context, name string) (<-chan leaderInfo, error) {
	leaders, err := e.m.Observe(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make(chan leaderInfo)
	go func() {
		defer close(out)
		for l := range leaders {
			select {
			case out <- infoOf(l):
			case <-ctx.Done():
			}
		}
	}()
	return out, nil
}

// infoOf is a leader as the agent's API tells it: no node when nobody
// leads.
func infoOf(l mesh.Leader) leaderInfo {
	if !l.Held {
		return leaderInfo{Name: l.Name}
	}
	return leaderInfo{Name: l.Name, Node: l.Node, Value: string(l.Value), Token: l.Token}
}

type meshLeadership struct{ *mesh.Leadership }

func (l meshLeadership) Leader() leaderInfo { return infoOf(l.Leadership.Leader()) }
