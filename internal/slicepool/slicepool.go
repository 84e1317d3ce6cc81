// Package slicepool keeps slices for reuse, by class of capacity.
//
// Under load a lockmesh node builds and drops a batch of operations per
// voter, and a slice of results, many thousand times a second; most of the
// garbage the collector then chases is these slices. Whoever knows when a
// batch is dead (encoded for the wire, or handled) may put it back in the
// pool it came from, for a later Get. Putting back is optional: slices not
// put back are collected as usual.
//
// The package is generic over the element type and imports only the
// standard library, so that package quorum may use it without importing
// anything else of the module. Each owner keeps its own pools: quorum the
// slices of the messages a Node makes (handed back to it by Node.Advance),
// the mesh those of the messages it decodes and queues.
package slicepool

import "sync"

// MaxLen is the capacity of the largest slice kept for reuse (a renewal
// batch of tens of thousands of operations is not worth keeping).
const MaxLen = 4096

// classes are the capacities slices are made with. Class i keeps the
// slices put back whose capacity is at least classes[i] (and below the next
// class), so that any slice it hands out can take a batch of that size: one
// pool for all sizes would hand the small slices of a lone caller to a
// merged batch of fifty, which must then allocate anyway.
var classes = [...]int{8, 32, 128, 512, MaxLen}

// Pool keeps slices of T by class of capacity. The zero value is ready;
// it is safe for use by several goroutines at once.
type Pool[T any] struct {
	classes [len(classes)]sync.Pool // *[]T, every element zero
	// boxes are the *[]T that Get emptied, for Put to fill again: a slice
	// header boxed anew for each Put would be an allocation per Put.
	boxes sync.Pool
}

// Get returns a slice of n zero elements, with capacity to spare: one put
// back earlier when its class has one.
func (p *Pool[T]) Get(n int) []T {
	for i, size := range classes {
		if n <= size {
			if b, ok := p.classes[i].Get().(*[]T); ok {
				s := (*b)[:n]
				*b = nil
				p.boxes.Put(b)
				return s
			}
			return make([]T, n, size)
		}
	}
	return make([]T, n)
}

// Put keeps s, cleared to its capacity, for a later Get. Nothing may use s
// afterwards.
func (p *Pool[T]) Put(s []T) {
	c := cap(s)
	if c < classes[0] || c > MaxLen {
		return
	}
	i := len(classes) - 1
	for classes[i] > c {
		i--
	}
	s = s[:c]
	clear(s) // let keys and values go; Get promises zero elements
	b, _ := p.boxes.Get().(*[]T)
	if b == nil {
		b = new([]T)
	}
	*b = s[:0]
	p.classes[i].Put(b)
}

// Emptied is s cleared and emptied, to be filled again by its owner, or
// nil when it is not worth keeping (none, or larger than MaxLen).
func Emptied[T any](s []T) []T {
	if cap(s) == 0 || cap(s) > MaxLen {
		return nil
	}
	clear(s)
	return s[:0]
}
