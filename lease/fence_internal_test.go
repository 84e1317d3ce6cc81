package lease

import (
	"fmt"
	"testing"
	"time"
)

// TestFenceOtherKeysDoNotWait holds one key inside a slow Apply and checks
// that Admit, Apply and Highest on another key of the same shard (the worst
// case) still finish, and that Admit on the held key waits for it.
func TestFenceOtherKeysDoNotWait(t *testing.T) {
	const held = "held"
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("other-", i); shardOf(k) == shardOf(held) {
			other = k
		}
	}

	f := NewFence()
	inside := make(chan struct{})
	release := make(chan struct{})
	applied := make(chan error, 1)
	go func() {
		applied <- f.Apply(held, 1, func() error {
			close(inside)
			<-release
			return nil
		})
	}()
	waitFor(t, inside, "Apply to start fn")

	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.Admit(other, 1); err != nil {
			t.Error(err)
		}
		if err := f.Apply(other, 2, func() error { return nil }); err != nil {
			t.Error(err)
		}
		if h, _ := f.Highest(held); h != 0 { // not recorded until fn returns
			t.Errorf("Highest(held) = %d during Apply", h)
		}
	}()
	waitFor(t, done, "calls on another key of the same shard")

	// Admit on the held key must wait for fn. Without sleeping we can only
	// catch it returning early if it is quick about it; a miss here is caught
	// by TestFenceResourceNeverGoesBack.
	sameKey := make(chan error, 1)
	go func() { sameKey <- f.Admit(held, 1) }()
	select {
	case err := <-sameKey:
		t.Fatalf("Admit on the held key returned (%v) while Apply's fn was running", err)
	default:
	}
	close(release)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if err := <-sameKey; err != nil {
		t.Fatal(err)
	}
}

// waitFor waits for ch to close, failing the test after a generous deadline
// rather than hanging.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
