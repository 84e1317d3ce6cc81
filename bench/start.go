package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
	"github.com/lockmesh/lockmesh/mesh"
)

// startResult is how long a mesh of three voters with data directories
// takes from its voters' start to its first grant, in three situations:
// a brand-new mesh with every voter up (each votes on the others' word that
// they never voted), a brand-new mesh with one voter missing and the
// operator's word (Config.NewMesh), and a full restart with one voter's
// machine gone after every voter has voted (the two left wait out their
// quarantine, one MaxTTL, then vote on each other's word).
type startResult struct {
	Setup      string `json:"setup"`
	Error      string `json:"error,omitempty"`
	Quarantine string `json:"quarantine"`
	// Each is the time to the first grant, in microseconds, over the
	// trials.
	NewAllUp    *workload.Summary `json:"new_all_up"`
	NewMeshTwo  *workload.Summary `json:"new_mesh_two_of_three"`
	RestartGone *workload.Summary `json:"full_restart_voter_gone"`
}

// startTrials is how many times each situation is timed in one run.
const startTrials = 3

func startToGrant(ctx context.Context, o options, log io.Writer) *startResult {
	res := &startResult{Setup: "lockmesh, 3 voters in 1 process, loopback TCP, data directories in a temp dir, DefaultConfig timing (TTL 10 s, round timeout 250 ms); time from the first voter's mesh.New to the first Acquire that returns, on v1"}
	cfg := mesh.DefaultLocalConfig()
	lanTiming(cfg)
	res.Quarantine = cfg.Timing.Quarantine().String()
	var all, two, gone []time.Duration
	for trial := range startTrials {
		dir, err := os.MkdirTemp("", "lockmesh-bench-start-")
		if err != nil {
			res.Error = err.Error()
			return res
		}
		defer os.RemoveAll(dir)
		d, err := timeStart(ctx, filepath.Join(dir, "all"), 3, false)
		if err != nil {
			res.Error = fmt.Sprintf("trial %d, every voter up: %v", trial, err)
			return res
		}
		all = append(all, d)
		d, err = timeStart(ctx, filepath.Join(dir, "two"), 2, true)
		if err != nil {
			res.Error = fmt.Sprintf("trial %d, two of three with NewMesh: %v", trial, err)
			return res
		}
		two = append(two, d)
		d, err = timeFullRestart(ctx, filepath.Join(dir, "restart"))
		if err != nil {
			res.Error = fmt.Sprintf("trial %d, full restart with a voter gone: %v", trial, err)
			return res
		}
		gone = append(gone, d)
		fmt.Fprintf(log, "bench: start %d: new %v, new with NewMesh %v, full restart %v\n", trial,
			all[trial].Round(time.Millisecond), two[trial].Round(time.Millisecond), gone[trial].Round(time.Millisecond))
	}
	res.NewAllUp = workload.Summarize(slices.Clone(all))
	res.NewMeshTwo = workload.Summarize(slices.Clone(two))
	res.RestartGone = workload.Summarize(slices.Clone(gone))
	return res
}

// startVoters starts up voters of the mesh founded by v1, v2, v3 (the
// first up of them), each with its directory under dir, and returns them
// and when the first started.
func startVoters(dir string, up int, newMesh bool) ([]*mesh.Mesh, time.Time, error) {
	voters := []string{"v1", "v2", "v3"}
	var nodes []*mesh.Mesh
	start := time.Now()
	for i := range up {
		cfg := mesh.DefaultLocalConfig()
		lanTiming(cfg)
		cfg.Name, cfg.Voters, cfg.Seed = voters[i], voters, int64(i+1)
		cfg.DataDir, cfg.NewMesh = filepath.Join(dir, voters[i]), newMesh
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr()}
		}
		m, err := mesh.New(cfg)
		if err != nil {
			closeAll(nodes)
			return nil, start, err
		}
		nodes = append(nodes, m)
	}
	return nodes, start, nil
}

// firstGrant waits for v1's first grant and releases it.
func firstGrant(ctx context.Context, m *mesh.Mesh) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := m.Acquire(ctx, "bench/start")
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func timeStart(ctx context.Context, dir string, up int, newMesh bool) (time.Duration, error) {
	nodes, start, err := startVoters(dir, up, newMesh)
	if err != nil {
		return 0, err
	}
	defer closeAll(nodes)
	if err := firstGrant(ctx, nodes[0]); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// timeFullRestart founds the mesh with every voter, grants, stops every
// voter, and times the restart of v1 and v2 alone.
func timeFullRestart(ctx context.Context, dir string) (time.Duration, error) {
	nodes, _, err := startVoters(dir, 3, false)
	if err != nil {
		return 0, err
	}
	err = firstGrant(ctx, nodes[0])
	// Every voter must have voted before the stop: wait for all three.
	if err == nil {
		err = waitFor(ctx, "every voter to vote", func() (bool, string) {
			for _, m := range nodes {
				if st := m.Status(); st.VotingState != mesh.Live {
					return false, st.Name + " " + st.VotingState.String()
				}
			}
			return true, ""
		})
	}
	closeAll(nodes)
	if err != nil {
		return 0, err
	}
	nodes, start, err := startVoters(dir, 2, false)
	if err != nil {
		return 0, err
	}
	defer closeAll(nodes)
	if err := firstGrant(ctx, nodes[0]); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func closeAll(nodes []*mesh.Mesh) {
	for _, m := range nodes {
		m.Shutdown()
	}
}

func (r *startResult) markdown(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("**lockmesh: start to first grant** (%s; quarantine %s): ", r.Setup, r.Quarantine)
	for _, s := range []struct {
		what string
		sum  *workload.Summary
	}{{"a new mesh, every voter up", r.NewAllUp}, {"a new mesh, 2 of 3 with NewMesh", r.NewMeshTwo}, {"a full restart, a voter gone", r.RestartGone}} {
		if s.sum != nil && s.sum.N > 0 {
			w("%s: median %s (min %s, max %s); ", s.what, us(s.sum.P50), us(s.sum.Min), us(s.sum.Max))
		}
	}
	if r.Error != "" {
		w("failed: %s", oneLine(r.Error))
	}
	w("\n\n")
}
