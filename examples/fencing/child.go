package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/sqlfence"
	"github.com/lockmesh/lockmesh/mesh"
)

// A child talks to the parent in lines. It writes on stdout:
//
//	listening ADDR          its gossip address, for the others' seeds
//	ready                   its node sees a majority of voters live
//	acquired TOKEN          it holds the lock; it waits for "go" on stdin
//	wrote TOKEN VALUE       its increment committed, setting the counter
//	stale TOKEN HIGHEST     the fence refused its increment
//	failed TOKEN ERROR      its increment failed otherwise
//	done INCREMENTS STALE FAILED
//
// and reads on stdin "go" (write now) or "stop" (finish and exit).

// childStartTimeout bounds the start of a node and its wait for the others.
const childStartTimeout = 30 * time.Second

// runChild runs one process of the demo and returns its exit code.
func runChild(args []string, stdin io.Reader, stdout io.Writer) int {
	fs := flag.NewFlagSet("fencing child", flag.ContinueOnError)
	name := fs.String("name", "", "node name")
	voters := fs.String("voters", "", "comma-separated voter names")
	seed := fs.String("seed", "", "gossip address of a running node")
	dir := fs.String("dir", "", "directory of the SQLite file")
	verbose := fs.Bool("v", false, "node logs on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c := &child{name: *name, out: stdout}
	if err := c.run(*voters, *seed, *dir, *verbose, stdin); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", *name, err)
		return 1
	}
	return 0
}

type child struct {
	name                      string
	out                       io.Writer
	increments, stale, failed int
}

func (c *child) say(format string, args ...any) {
	fmt.Fprintf(c.out, format+"\n", args...)
}

func (c *child) run(voters, seed, dir string, verbose bool, stdin io.Reader) error {
	db, fence, err := openStore(dir)
	if err != nil {
		return err
	}
	defer db.Close()

	cfg := mesh.DefaultLocalConfig() // loopback, free ports, 1s TTL
	cfg.Name = c.name
	cfg.Voters = strings.Split(voters, ",")
	if seed != "" {
		cfg.Seeds = []string{seed}
	}
	if verbose {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: c.name, Level: hclog.Info, Output: os.Stderr})
	}
	m, err := mesh.New(cfg)
	if err != nil {
		return err
	}
	defer m.Shutdown()
	c.say("listening %s", m.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), childStartTimeout)
	err = m.WaitReady(ctx)
	cancel()
	if err != nil {
		return err
	}
	c.say("ready")

	stop, goAhead := readCommands(stdin)
	for stop.Err() == nil {
		c.once(stop, goAhead, m, db, fence)
	}
	c.say("done %d %d %d", c.increments, c.stale, c.failed)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Leave(ctx) // hand any lease over at once; the others are stopping too
	return nil
}

// once takes the lock, waits for the parent's go-ahead, increments, and
// releases.
func (c *child) once(stop context.Context, goAhead <-chan struct{}, m *mesh.Mesh, db *sql.DB, fence *sqlfence.Fence) {
	l, err := m.Acquire(stop, lockKey)
	if err != nil {
		return // stop ended the wait; any other failure is tried again
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Release(ctx) // after a pause the lease is long lost: nothing to do
	}()
	c.say("acquired %d", l.Token())
	select {
	case <-goAhead:
	case <-stop.Done():
		return
	}
	// A careful holder would check l.Err() here. It would not help: the
	// pause can come between that check and the write, as it does here
	// between "acquired" and "go". The fence is what stops the write.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	v, err := increment(ctx, db, fence, c.name, l.Token())
	var stale *lease.StaleTokenError
	switch {
	case err == nil:
		c.increments++
		c.say("wrote %d %d", l.Token(), v)
	case errors.As(err, &stale):
		c.stale++
		c.say("stale %d %d", l.Token(), stale.Highest)
	default:
		c.failed++
		c.say("failed %d %s", l.Token(), strings.ReplaceAll(err.Error(), "\n", " "))
	}
}

// readCommands reads the parent's lines: each "go" is sent on goAhead, and
// "stop", or the end of stdin, cancels stop.
func readCommands(stdin io.Reader) (stop context.Context, goAhead <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{}, 16)
	go func() {
		defer cancel()
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "go":
				ch <- struct{}{}
			case "stop":
				return
			}
		}
	}()
	return ctx, ch
}
