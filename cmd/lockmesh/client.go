package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// client is a connection to the local agent (see api.go).
type client struct {
	conn net.Conn
	node string // the agent's node name, from its hello

	wmu sync.Mutex
	enc *json.Encoder

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan reply

	// events receives the agent's events (lost, leader), in order.
	events chan reply
	// done closes when the connection ends; err then says why.
	done chan struct{}
	err  error
}

// dial connects to the agent at path and checks that it speaks apiVersion.
func dial(ctx context.Context, path string) (*client, error) {
	if err := checkSocketOwner(path); err != nil {
		return nil, fail(exitUnavailable, "%v", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fail(exitUnavailable, "cannot reach the agent (is \"lockmesh agent\" running, with -socket %s?): %v", path, err)
	}
	c := &client{conn: conn, enc: json.NewEncoder(conn), pending: make(map[uint64]chan reply),
		events: make(chan reply, 64), done: make(chan struct{})}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 4096), 16<<20)
	var hello reply
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &hello) != nil || hello.Event != "hello" {
		conn.Close()
		return nil, fail(exitUnavailable, "%s: no hello from the agent (%v)", path, sc.Err())
	}
	conn.SetReadDeadline(time.Time{})
	if !speaks(hello.Versions, apiVersion) {
		conn.Close()
		return nil, fail(exitUnavailable, "the agent speaks API versions %v, this lockmesh %d: upgrade one of them", hello.Versions, apiVersion)
	}
	c.node = hello.Node
	go c.read(sc)
	return c, nil
}

func speaks(versions []int, v int) bool {
	for _, x := range versions {
		if x == v {
			return true
		}
	}
	return false
}

// checkSocketOwner refuses the default socket path when it lies in a
// shared directory and belongs to another user: someone else could have
// put it there to play the agent.
func checkSocketOwner(path string) error {
	if path != defaultSocket() || os.Getenv("XDG_RUNTIME_DIR") != "" {
		return nil // chosen on purpose, or in a directory of this user's own
	}
	uid, ok := fileOwner(path)
	if ok && uid != os.Getuid() && uid != 0 {
		return fmt.Errorf("%s belongs to user %d, not to you or root: refusing it (give -socket to use it anyway)", path, uid)
	}
	return nil
}

// read dispatches the agent's lines until the connection ends.
func (c *client) read(sc *bufio.Scanner) {
	defer close(c.done)
	for sc.Scan() {
		var r reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			c.err = fmt.Errorf("unreadable line from the agent: %w", err)
			c.conn.Close()
			return
		}
		if r.ID == 0 {
			select {
			case c.events <- r:
			default: // a client that does not read events drops them
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[r.ID]
		delete(c.pending, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	c.err = sc.Err()
	if c.err == nil {
		c.err = errors.New("the agent closed the connection")
	}
}

// call sends req and waits for its answer, the end of the connection, or
// the end of ctx. An answer with an error returns it as an *apiError.
func (c *client) call(ctx context.Context, req request) (reply, error) {
	ch := make(chan reply, 1)
	c.mu.Lock()
	c.nextID++
	req.ID, req.V = c.nextID, apiVersion
	c.pending[req.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
	}()
	c.wmu.Lock()
	err := c.enc.Encode(req)
	c.wmu.Unlock()
	if err != nil {
		return reply{}, fmt.Errorf("writing to the agent: %w", err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return r, r.Error
		}
		return r, nil
	case <-c.done:
		return reply{}, fmt.Errorf("lost the agent: %w", c.err)
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// close ends the connection: the agent releases what it holds for it.
func (c *client) close() {
	c.conn.Close()
	<-c.done
}
