package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
	"github.com/lockmesh/lockmesh/mesh"
)

// crashResult is the time from a holder's crash to the next grant of its
// key to a waiter on another node. Voters refuse a new grant until the
// exclusion timer of their last accept of the holder's renewal ends, so the
// expected time is between TTL − renew interval and TTL (1 s), plus a
// round trip.
type crashResult struct {
	Setup string `json:"setup"`
	Error string `json:"error,omitempty"`
	TTL   string `json:"ttl"`
	// CrashToGrant, in microseconds, over the trials.
	CrashToGrant *workload.Summary `json:"crash_to_grant"`
	// Trials are the individual times, in milliseconds, and HolderLeft
	// what remained of the holder's own deadline when it crashed.
	TrialsMs     []float64 `json:"trials_ms"`
	HolderLeftMs []float64 `json:"holder_deadline_left_ms"`
}

// crashToGrant crashes (Shutdown, no release) the voter holding a key
// while another voter waits for it, o.crashTrials times, restarting the
// crashed voter between trials with its name and addresses.
func crashToGrant(ctx context.Context, o options, log io.Writer) *crashResult {
	res := &crashResult{Setup: "lockmesh, 3 voters in 1 process, loopback TCP; holder on v3, waiter on v1; v3 is shut down without releasing (mesh.Shutdown), then restarted for the next trial"}
	c, err := startCluster(ctx, 3)
	if err != nil {
		res.Error = fmt.Sprintf("start: %v", err)
		return res
	}
	defer c.close()
	res.TTL = c.cfgs[0].Timing.TTL.String()
	var took []time.Duration
	for trial := range o.crashTrials {
		d, left, err := crashOnce(ctx, c, fmt.Sprintf("bench/crash/%d", trial))
		if err != nil {
			res.Error = fmt.Sprintf("trial %d: %v", trial, err)
			break
		}
		fmt.Fprintf(log, "bench: crash %d: next grant %v after the crash\n", trial, d.Round(time.Millisecond))
		took = append(took, d)
		res.TrialsMs = append(res.TrialsMs, float64(d)/float64(time.Millisecond))
		res.HolderLeftMs = append(res.HolderLeftMs, float64(left)/float64(time.Millisecond))
		if trial < o.crashTrials-1 {
			if err := restartVoter(ctx, c, 2); err != nil {
				res.Error = fmt.Sprintf("restarting v3 after trial %d: %v", trial, err)
				break
			}
		}
	}
	res.CrashToGrant = workload.Summarize(slices.Clone(took))
	return res
}

// crashOnce times one crash: v3 holds key, v1 waits, v3 stops.
func crashOnce(ctx context.Context, c *cluster, key string) (took, holderLeft time.Duration, err error) {
	holder, waiter := c.nodes[2], c.nodes[0]
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		return 0, 0, fmt.Errorf("holder: %w", err)
	}
	rounds := waiter.Status().Proposer.Rounds
	type grant struct {
		at  time.Time
		err error
	}
	got := make(chan grant, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key)
		at := time.Now()
		if err == nil {
			l.Release(ctx)
		}
		got <- grant{at, err}
	}()
	// The waiter has asked (its first round went out) before the crash.
	if err := waitFor(ctx, "the waiter to ask", func() (bool, string) {
		return waiter.Status().Proposer.Rounds > rounds, "no round yet"
	}); err != nil {
		return 0, 0, err
	}
	deadline := held.Deadline()
	crashed := time.Now()
	holder.Shutdown()
	g := <-got
	if g.err != nil {
		return 0, 0, fmt.Errorf("waiter: %w", g.err)
	}
	return g.at.Sub(crashed), deadline.Sub(crashed), nil
}

// restartVoter starts node i again with its name and addresses (memberlist
// does not let a name come back at another address) and waits until every
// voter votes again.
func restartVoter(ctx context.Context, c *cluster, i int) error {
	old := c.nodes[i]
	st := old.Status()
	cfg := *c.cfgs[i]
	_, port, err := net.SplitHostPort(st.Addr)
	if err != nil {
		return err
	}
	cfg.BindPort, _ = strconv.Atoi(port)
	cfg.AdvertisePort = cfg.BindPort
	cfg.RPCAddr = st.RPCAddr
	cfg.Seeds = []string{c.nodes[0].Addr()}
	m, err := mesh.New(&cfg)
	if err != nil {
		return err
	}
	c.nodes[i], c.cfgs[i] = m, &cfg
	return c.waitReady(ctx)
}

func (r *crashResult) markdown(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("**lockmesh: crash to grant** (%s; TTL %s): ", r.Setup, r.TTL)
	if s := r.CrashToGrant; s != nil && s.N > 0 {
		w("median %s, min %s, max %s over %d crashes", us(s.P50), us(s.Min), us(s.Max), s.N)
		left := workload.Summarize(nil)
		var d []time.Duration
		for _, ms := range r.HolderLeftMs {
			d = append(d, time.Duration(ms*float64(time.Millisecond)))
		}
		if len(d) > 0 {
			left = workload.Summarize(d)
			w(" (the holder's own deadline was %s to %s away when it crashed)", us(left.Min), us(left.Max))
		}
	}
	if r.Error != "" {
		w(" — failed: %s", oneLine(r.Error))
	}
	w("\n\n")
}
