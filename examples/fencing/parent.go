package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// demoConfig says how long the demo runs, how often it freezes a holder,
// and how to start a child.
type demoConfig struct {
	Duration time.Duration // how long the children increment, once all are ready
	Pauses   int           // holders to freeze past their lease; the demo runs until all are done
	Dir      string        // holds the SQLite file
	Verbose  bool          // print every increment; children log on Stderr
	Out      io.Writer     // the story
	Stderr   io.Writer     // the children's stderr; nil: discarded
	// Command returns the command that runs a child with args (the child's
	// flags): this program with childArg, or a test binary.
	Command func(args ...string) *exec.Cmd
}

// pauseTimeout bounds one freeze: the voters let another node take the
// lock one TTL (1s) after the holder's last renewal; the rest is slack for
// a machine loaded by the race detector.
const pauseTimeout = 30 * time.Second

// result is what the demo counted.
type result struct {
	increments int // increments that committed, as the children reported them
	stale      int // increments the fence refused
	failed     int // increments that failed otherwise
	pauses     int // holders frozen and resumed
	byNode     map[string]int
	audit      audit
	took       time.Duration
}

func (r result) summary() string {
	return fmt.Sprintf("OK: counter %d = %d increments committed (a %d, b %d, c %d); %d stale writes refused after %d pauses; "+
		"%d failed; tokens never went down over %d grants (%d..%d); %s.",
		r.audit.counter, r.increments, r.byNode["a"], r.byNode["b"], r.byNode["c"], r.stale, r.pauses,
		r.failed, r.audit.grants, r.audit.first, r.audit.last, r.took.Round(time.Millisecond))
}

// proc is one child process.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (p *proc) send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// event is a line a child wrote, split in fields.
type event struct {
	p      *proc
	fields []string
	eof    bool // stdout closed: the child is exiting
}

// demo is the parent's state.
type demo struct {
	cfg     demoConfig
	procs   []*proc
	events  chan event
	start   time.Time // when all three were ready
	started bool      // all three are ready: pauses may begin
	res     result
	froze   *frozen // the holder frozen now, if any
}

// frozen is a holder the parent stopped right after it took the lock.
type frozen struct {
	p        *proc
	token    uint64
	at       time.Time
	resumed  bool
	takeover string // who took the lock over, and when
}

// runDemo runs the whole demo and checks the result.
func runDemo(cfg demoConfig) (result, error) {
	d := &demo{cfg: cfg, events: make(chan event, 64), res: result{byNode: map[string]int{}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, fence, err := openStore(cfg.Dir)
	if err != nil {
		return d.res, err
	}
	defer db.Close()
	if err := createSchema(ctx, db, fence); err != nil {
		return d.res, err
	}
	d.say("lockmesh fencing demo: processes a, b and c each embed a voter node and, holding the lock %q, increment a counter in %s through sqlfence.",
		lockKey, cfg.Dir+"/counter.db")
	defer d.killAll()
	if err := d.startAll(); err != nil {
		return d.res, err
	}
	if err := d.drive(); err != nil {
		return d.res, err
	}
	if err := d.stopAll(); err != nil {
		return d.res, err
	}
	d.res.took = time.Since(d.start)
	a, err := check(ctx, db)
	d.res.audit = a
	if err != nil {
		return d.res, err
	}
	if a.writes != int64(d.res.increments) {
		return d.res, fmt.Errorf("lost update: the processes saw %d increments commit, the file logs %d", d.res.increments, a.writes)
	}
	if d.res.stale < d.res.pauses {
		return d.res, fmt.Errorf("%d stale writes refused after %d pauses: each resumed holder should have been refused", d.res.stale, d.res.pauses)
	}
	return d.res, nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.cfg.Out, format+"\n", args...)
}

// startAll starts a, then b and c with a's gossip address as their seed,
// and waits until all three are ready.
func (d *demo) startAll() error {
	t := time.Now()
	seed := ""
	for _, name := range []string{"a", "b", "c"} {
		args := []string{"-name", name, "-voters", "a,b,c", "-dir", d.cfg.Dir, "-seed", seed}
		if d.cfg.Verbose {
			args = append(args, "-v")
		}
		p, err := d.startChild(name, args)
		if err != nil {
			return err
		}
		ev, err := d.next(childStartTimeout)
		switch {
		case err != nil:
			return err
		case ev.p != p || len(ev.fields) != 2 || ev.fields[0] != "listening":
			return fmt.Errorf("%s said %q, expected its gossip address", ev.p.name, ev.fields)
		}
		if seed == "" {
			seed = ev.fields[1]
		}
	}
	// The first ready ones start taking the lock while the others get
	// ready: answer them meanwhile (no pause until all are ready).
	for ready := 0; ready < len(d.procs); {
		ev, err := d.next(childStartTimeout)
		if err != nil {
			return err
		}
		if len(ev.fields) == 1 && ev.fields[0] == "ready" {
			ready++
			continue
		}
		if err := d.handle(ev); err != nil {
			return err
		}
	}
	d.start, d.started = time.Now(), true
	d.say("a, b and c are ready (gossip from %s), after %s.", seed, time.Since(t).Round(time.Millisecond))
	return nil
}

func (d *demo) startChild(name string, args []string) (*proc, error) {
	cmd := d.cfg.Command(args...)
	cmd.Stderr = d.cfg.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin}
	d.procs = append(d.procs, p)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.events <- event{p: p, fields: strings.Fields(sc.Text())}
		}
		d.events <- event{p: p, eof: true}
	}()
	return p, nil
}

// next returns the next line of any child, or an error after wait.
func (d *demo) next(wait time.Duration) (event, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case ev := <-d.events:
		if ev.eof {
			return ev, fmt.Errorf("%s exited unexpectedly", ev.p.name)
		}
		return ev, nil
	case <-timer.C:
		return event{}, fmt.Errorf("no word from any process for %v", wait)
	}
}

// drive answers the children until the duration is over and every pause
// has been done.
func (d *demo) drive() error {
	for {
		if d.froze == nil && d.res.pauses >= d.cfg.Pauses && time.Since(d.start) >= d.cfg.Duration {
			return nil
		}
		if d.froze != nil && time.Since(d.froze.at) > pauseTimeout {
			return fmt.Errorf("%s frozen with token %d for %v: nobody took the lock over", d.froze.p.name, d.froze.token, pauseTimeout)
		}
		ev, err := d.next(pauseTimeout)
		if err != nil {
			return err
		}
		if err := d.handle(ev); err != nil {
			return err
		}
	}
}

func (d *demo) handle(ev event) error {
	if len(ev.fields) < 2 {
		return fmt.Errorf("%s said %q", ev.p.name, ev.fields)
	}
	token, err := strconv.ParseUint(ev.fields[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%s said %q", ev.p.name, ev.fields)
	}
	switch ev.fields[0] {
	case "acquired":
		return d.acquired(ev.p, token)
	case "wrote":
		return d.wrote(ev.p, token, ev.fields[2:])
	case "stale":
		return d.refused(ev.p, token, ev.fields[2:])
	case "failed":
		d.res.failed++
		d.say("%s: increment with token %d failed: %s", ev.p.name, token, strings.Join(ev.fields[2:], " "))
		return nil
	}
	return fmt.Errorf("%s said %q", ev.p.name, ev.fields)
}

// acquired lets the holder write, or, when a pause is due, freezes it first.
// The "go" waits in the pipe: the holder reads it the moment it resumes.
func (d *demo) acquired(p *proc, token uint64) error {
	if d.froze == nil && d.pauseDue() {
		if err := freeze(p.cmd.Process); err != nil {
			return err
		}
		d.froze = &frozen{p: p, token: token, at: time.Now()}
		d.say("pause %d: %s took %q with token %d; SIGSTOP before it writes.", d.res.pauses+1, p.name, lockKey, token)
	}
	return p.send("go")
}

// pauseDue spreads the pauses evenly over the duration.
func (d *demo) pauseDue() bool {
	if !d.started || d.res.pauses >= d.cfg.Pauses {
		return false
	}
	due := d.cfg.Duration * time.Duration(d.res.pauses+1) / time.Duration(d.cfg.Pauses+1)
	return time.Since(d.start) >= due
}

// wrote counts an increment; one with a higher token than the frozen
// holder's, by another process, is the moment to resume the frozen one.
func (d *demo) wrote(p *proc, token uint64, rest []string) error {
	d.res.increments++
	d.res.byNode[p.name]++
	if d.cfg.Verbose {
		d.say("%s: token %d, counter %s", p.name, token, strings.Join(rest, " "))
	}
	f := d.froze
	switch {
	case f == nil:
		return nil
	case p == f.p:
		return fmt.Errorf("%s, frozen with token %d, had its write accepted after %s", p.name, token, f.takeover)
	case f.resumed || token <= f.token:
		return nil
	}
	f.takeover = fmt.Sprintf("%s took the lock over with token %d and wrote counter %s", p.name, token, strings.Join(rest, " "))
	d.say("         %s, %s after the SIGSTOP.", f.takeover, time.Since(f.at).Round(time.Millisecond))
	f.resumed = true
	return thaw(f.p.cmd.Process)
}

// refused counts a refusal; the frozen holder's ends its pause.
func (d *demo) refused(p *proc, token uint64, rest []string) error {
	d.res.stale++
	highest := strings.Join(rest, " ")
	if f := d.froze; f != nil && p == f.p && f.resumed {
		d.say("         SIGCONT %s: its late write with token %d is refused by the fence (highest seen %s).", p.name, token, highest)
		d.res.pauses++
		d.froze = nil
		return nil
	}
	d.say("%s: write with token %d refused (highest seen %s): its lease had ended unpaused.", p.name, token, highest)
	return nil
}

// stopAll tells every child to stop and collects its counts.
func (d *demo) stopAll() error {
	for _, p := range d.procs {
		if err := p.send("stop"); err != nil {
			return fmt.Errorf("stopping %s: %w", p.name, err)
		}
	}
	var reported int
	for done := 0; done < len(d.procs); {
		ev, err := d.next(childStartTimeout)
		if err != nil {
			return err
		}
		switch ev.fields[0] {
		case "done":
			done++
			n, _ := strconv.Atoi(ev.fields[1])
			reported += n
		case "acquired": // a last grant before the stop reached it
		default:
			if err := d.handle(ev); err != nil {
				return err
			}
		}
	}
	if reported != d.res.increments {
		return fmt.Errorf("the processes report %d increments in all, their lines said %d", reported, d.res.increments)
	}
	for _, p := range d.procs {
		if err := p.cmd.Wait(); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	d.procs = nil
	return nil
}

// killAll ends children still running after a failure.
func (d *demo) killAll() {
	for _, p := range d.procs {
		thaw(p.cmd.Process)
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}
