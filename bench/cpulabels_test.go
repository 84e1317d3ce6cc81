package main

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Goroutines started under a label are counted under it, the rest under "".
func TestCPUByLabel(t *testing.T) {
	if testing.Short() {
		t.Skip("profiles the process for a moment")
	}
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	cpu, err := cpuByLabel("role", func() {
		var wg sync.WaitGroup
		for _, role := range []string{"voter", "other"} {
			labelled(context.Background(), "role", role, func() {
				wg.Add(1)
				go func() { // inherits the label
					defer wg.Done()
					spin(300 * time.Millisecond)
				}()
			})
		}
		spin(100 * time.Millisecond)
		wg.Wait()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"voter", "other", ""} {
		if cpu[role] <= 0 {
			t.Errorf("no CPU under %q: %v", role, cpu)
		}
	}
}
