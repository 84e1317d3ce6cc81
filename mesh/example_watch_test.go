package mesh_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// Watch a key from another node: who holds it, under which token, with
// which value, or that it is free, each change pushed by the voters as it
// happens.
func ExampleMesh_Watch() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	states, err := c.Watch(ctx, "reports/daily")
	if err != nil {
		panic(err)
	}
	var last mesh.Holder
	show := func() {
		h := <-states
		switch {
		case !h.Held:
			fmt.Println("free")
		case h.Token == last.Token:
			fmt.Printf("held by %s, value %q, the same token\n", h.Node, h.Value)
		case h.Token > last.Token:
			fmt.Printf("held by %s, value %q, a new token\n", h.Node, h.Value)
		}
		last = h
	}
	show() // the key's state now

	l, err := a.Acquire(ctx, "reports/daily", mesh.WithValue([]byte("step 1")))
	if err != nil {
		panic(err)
	}
	show()
	l.SetValue(ctx, []byte("step 2")) // the same grant: the same token
	show()
	l.Release(ctx)
	show()
	l, err = b.Acquire(ctx, "reports/daily")
	if err != nil {
		panic(err)
	}
	show()
	l.Release(ctx)
	// Output:
	// free
	// held by a, value "step 1", a new token
	// held by a, value "step 2", the same token
	// free
	// held by b, value "", a new token
}

// Locks lists the locks held mesh-wide under a prefix: holder, token,
// value and about how long each lease has left.
func ExampleMesh_Locks() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, take := range []struct {
		m     *mesh.Mesh
		key   string
		value string
	}{{a, "jobs/2", "batch 7"}, {b, "jobs/1", ""}, {a, "other", ""}} {
		if _, err := take.m.Acquire(ctx, take.key, mesh.WithValue([]byte(take.value))); err != nil {
			panic(err)
		}
	}
	held, err := c.Locks(ctx, "jobs/")
	if err != nil {
		panic(err)
	}
	for _, h := range held {
		fmt.Printf("%s: %s, value %q, time left: %v\n", h.Key, h.Node, h.Value, h.TimeLeft > 0)
	}
	// Output:
	// jobs/1: b, value "", time left: true
	// jobs/2: a, value "batch 7", time left: true
}
