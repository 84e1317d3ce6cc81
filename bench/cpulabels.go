package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"time"
)

// Nodes that share one process share its CPU time; the kernel cannot tell
// a voter's share from a non-voter's. The Go CPU profiler can: every
// goroutine a node starts inherits the pprof labels of the goroutine that
// started it, so a node created under pprof.Do(ctx, role=voter) has its
// gossip, timers, connection readers and request handlers all labelled.
// cpuByLabel profiles the process for the length of fn and adds up the CPU
// time of the samples by the value of one label. Samples without the label
// (the garbage collector's workers, the scheduler, timers run by the
// runtime) add up under "".

// cpuByLabel runs fn under the CPU profiler and returns the CPU time of
// the samples taken meanwhile, by the value of label key.
func cpuByLabel(key string, fn func()) (map[string]time.Duration, error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		fn()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	fn()
	pprof.StopCPUProfile()
	return sumProfileByLabel(buf.Bytes(), key)
}

// labelled runs fn with the label key=value on the calling goroutine, so
// that the goroutines fn starts carry it too.
func labelled(ctx context.Context, key, value string, fn func()) {
	pprof.Do(ctx, pprof.Labels(key, value), func(context.Context) { fn() })
}

// sumProfileByLabel reads a gzipped pprof profile (profile.proto) and adds
// up each sample's "cpu" value by the value of its label key. It reads only
// the fields it needs: sample_type (1), sample (2: value 2, label 3) and
// string_table (6).
func sumProfileByLabel(gz []byte, key string) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	type sample struct {
		values []int64
		labels [][2]int64 // string indexes of key and value
	}
	var (
		strs    []string
		types   []int64 // string index of each sample type's name
		samples []sample
	)
	err = eachField(raw, func(num int, v uint64, b []byte) error {
		switch num {
		case 1: // sample_type: ValueType{type 1, unit 2}
			return eachField(b, func(num int, v uint64, _ []byte) error {
				if num == 1 {
					types = append(types, int64(v))
				}
				return nil
			})
		case 2: // sample: location_id 1, value 2, label 3
			var s sample
			err := eachField(b, func(num int, v uint64, b []byte) error {
				switch {
				case num == 2 && b == nil:
					s.values = append(s.values, int64(v))
				case num == 2: // packed
					for len(b) > 0 {
						x, n := binary.Uvarint(b)
						if n <= 0 {
							return errors.New("bad packed value")
						}
						s.values, b = append(s.values, int64(x)), b[n:]
					}
				case num == 3: // Label{key 1, str 2, num 3, num_unit 4}
					var l [2]int64
					err := eachField(b, func(num int, v uint64, _ []byte) error {
						if num == 1 || num == 2 {
							l[num-1] = int64(v)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 6: // string_table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	cpu := -1
	for i, t := range types {
		if str(t) == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("profile: no cpu sample type")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if cpu >= len(s.values) {
			continue
		}
		value := ""
		for _, l := range s.labels {
			if str(l[0]) == key {
				value = str(l[1])
			}
		}
		out[value] += time.Duration(s.values[cpu])
	}
	return out, nil
}

// eachField calls fn for each field of a protobuf message: a varint's value
// in v (b nil), a length-delimited field's bytes in b. Fixed-size fields
// are skipped; groups are refused.
func eachField(msg []byte, fn func(num int, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		tag, n := binary.Uvarint(msg)
		if n <= 0 {
			return errors.New("bad tag")
		}
		msg = msg[n:]
		num := int(tag >> 3)
		switch tag & 7 {
		case 0:
			v, n := binary.Uvarint(msg)
			if n <= 0 {
				return errors.New("bad varint")
			}
			msg = msg[n:]
			if err := fn(num, v, nil); err != nil {
				return err
			}
		case 1:
			if len(msg) < 8 {
				return errors.New("short fixed64")
			}
			msg = msg[8:]
		case 2:
			l, n := binary.Uvarint(msg)
			if n <= 0 || l > uint64(len(msg)-n) {
				return errors.New("bad length")
			}
			b := msg[n : n+int(l)]
			msg = msg[n+int(l):]
			if err := fn(num, 0, b); err != nil {
				return err
			}
		case 5:
			if len(msg) < 4 {
				return errors.New("short fixed32")
			}
			msg = msg[4:]
		default:
			return fmt.Errorf("wire type %d", tag&7)
		}
	}
	return nil
}
