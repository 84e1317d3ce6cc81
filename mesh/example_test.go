package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

// A mesh of one voter on loopback: take a lock, write under its token,
// release it.
func Example() {
	cfg := mesh.DefaultLocalConfig()
	cfg.Name = "solo"
	cfg.Voters = []string{"solo"}
	m, err := mesh.New(cfg)
	if err != nil {
		panic(err)
	}
	defer m.Shutdown()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := m.Acquire(ctx, "invoices/2026-11")
	if err != nil {
		panic(err)
	}
	fence := lease.NewFence() // stands for the database the lock protects
	err = fence.Apply(l.Key(), l.Token(), func() error {
		// write under the lock
		return nil
	})
	fmt.Println("written:", err == nil)

	_, err = m.TryAcquire(ctx, "invoices/2026-11")
	fmt.Println("second try locked:", errors.Is(err, mesh.ErrLocked))

	fmt.Println("released:", l.Release(ctx) == nil)
	<-l.Done()
	fmt.Println("lease error:", l.Err())
	// Output:
	// written: true
	// second try locked: true
	// released: true
	// lease error: mesh: lease released
}

// Work under a lease should stop when the lease ends: Context is cancelled
// then, with the reason.
func ExampleLease_Context() {
	cfg := mesh.DefaultLocalConfig()
	cfg.Name = "solo"
	cfg.Voters = []string{"solo"}
	m, err := mesh.New(cfg)
	if err != nil {
		panic(err)
	}
	defer m.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := m.Acquire(ctx, "report")
	if err != nil {
		panic(err)
	}
	work := l.Context() // pass it to whatever runs under the lock
	l.Release(ctx)
	<-work.Done()
	fmt.Println(context.Cause(work))
	// Output: mesh: lease released
}
