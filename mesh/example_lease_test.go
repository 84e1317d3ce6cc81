package mesh_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// A holder publishes a value with its lease (an address, a job id): other
// nodes read it with Holder, and a TryAcquire that finds the key held
// names it. SetValue changes it while the lease is held.
func ExampleWithValue() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	l, err := a.Acquire(ctx, "primary", mesh.WithValue([]byte("10.0.0.1:5432")))
	if err != nil {
		panic(err)
	}
	h, _ := b.Holder(ctx, "primary")
	fmt.Printf("%s holds it at %s\n", h.Node, h.Value)

	if err := l.SetValue(ctx, []byte("10.0.0.9:5432")); err != nil {
		panic(err)
	}
	_, err = b.TryAcquire(ctx, "primary")
	var locked *mesh.LockedError
	if errors.As(err, &locked) {
		fmt.Printf("b's try: held by %s at %s\n", locked.Holder, locked.Value)
	}

	// Every renewal carries the value to every voter: it is bounded by
	// Config.MaxValueSize (1024 bytes unless set).
	_, err = b.Acquire(ctx, "big", mesh.WithValue(bytes.Repeat([]byte("x"), 2048)))
	fmt.Println("2 KiB value:", errors.Is(err, mesh.ErrValueTooLarge))

	l.Release(ctx)
	h, _ = b.Holder(ctx, "primary")
	fmt.Printf("released: held %v, value %q\n", h.Held, h.Value)
	// Output:
	// a holds it at 10.0.0.1:5432
	// b's try: held by a at 10.0.0.9:5432
	// 2 KiB value: true
	// released: held false, value ""
}

// A counting semaphore of 2: two nodes hold it at once, each on a slot of
// its own with its own fencing token; a third waits until a slot frees.
func ExampleMesh_AcquireSemaphore() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	la, err := a.AcquireSemaphore(ctx, "encoders", 2)
	if err != nil {
		panic(err)
	}
	lb, err := b.AcquireSemaphore(ctx, "encoders", 2)
	if err != nil {
		panic(err)
	}
	fmt.Println("a and b hold a slot each:", la.Key() != lb.Key()) // encoders#0, encoders#1

	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.AcquireSemaphore(short, "encoders", 2)
	stop()
	fmt.Println("c gave up after 300ms:", errors.Is(err, context.DeadlineExceeded))

	got := make(chan *mesh.Lease)
	go func() {
		l, err := c.AcquireSemaphore(ctx, "encoders", 2) // waits, in turn
		if err != nil {
			panic(err)
		}
		got <- l
	}()
	la.Release(ctx)
	lc := <-got
	fmt.Println("c got a's slot:", lc.Key() == la.Key(), "with a higher token:", lc.Token() > la.Token())
	lb.Release(ctx)
	lc.Release(ctx)
	// Output:
	// a and b hold a slot each: true
	// c gave up after 300ms: true
	// c got a's slot: true with a higher token: true
}

// An Acquire whose ctx ends says what it waited for and whether a grant
// may have happened as it ended (it is given back if so).
func ExampleCancelledError() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	l, err := a.Acquire(ctx, "reports/daily")
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	_, err = b.Acquire(short, "reports/daily")
	var cancelled *mesh.CancelledError
	if errors.As(err, &cancelled) {
		fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded))
		fmt.Println("waited for a holder:", errors.Is(err, mesh.ErrLocked))
		fmt.Println("may have been granted:", cancelled.MayHaveBeenGranted())
	}
	// Output:
	// deadline exceeded: true
	// waited for a holder: true
	// may have been granted: false
}

// Granted is when the holder's clock started for the grant; Renewed fires
// each time a renewal moves the deadline, so a holder can see how far
// ahead it may act.
func ExampleLease_Renewed() {
	nodes := startLocal([]string{"solo"}, "solo")
	defer shutdown(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := nodes[0].Acquire(ctx, "k")
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)

	renewed := l.Renewed() // take the channel, then read Deadline
	first := l.Deadline()
	fmt.Println("granted before its deadline:", l.Granted().Before(first))
	select {
	case <-renewed: // every Config.Timing.RenewInterval (TTL/3)
		fmt.Println("renewed; deadline later:", l.Deadline().After(first))
	case <-l.Done():
		fmt.Println("lost:", l.Err())
	}
	// Output:
	// granted before its deadline: true
	// renewed; deadline later: true
}
