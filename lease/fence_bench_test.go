package lease_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/lockmesh/lockmesh/lease"
)

// BenchmarkFenceAdmit measures Admit on known keys from all Ps at once: the
// path every fenced write takes. Each goroutine writes under one token per key
// (the holder-writes-many-times case), so no call fails.
//
//	spread:  1024 keys, goroutines rarely meet on one key
//	hot-key: every goroutine on the same key, the worst contention
func BenchmarkFenceAdmit(b *testing.B) {
	for _, c := range []struct {
		name string
		keys int
	}{{"spread", 1024}, {"hot-key", 1}} {
		b.Run(c.name, func(b *testing.B) {
			f := lease.NewFence()
			keys := make([]string, c.keys)
			for i := range keys {
				keys[i] = fmt.Sprintf("invoices/%04d", i)
				if err := f.Admit(keys[i], 7); err != nil {
					b.Fatal(err)
				}
			}
			var seed atomic.Uint32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(7919))
				for pb.Next() {
					if err := f.Admit(keys[i%len(keys)], 7); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkFenceApply is BenchmarkFenceAdmit's spread case through Apply with
// an empty fn, to show what the extra step costs.
func BenchmarkFenceApply(b *testing.B) {
	f := lease.NewFence()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("invoices/%04d", i)
	}
	var seed atomic.Uint32
	write := func() error { return nil }
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(7919))
		for pb.Next() {
			if err := f.Apply(keys[i%len(keys)], 7, write); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
