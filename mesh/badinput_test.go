package mesh

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

func frame(typ byte, id uint64, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(9+len(body)))
	b = append(b, typ)
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, body...)
}

func hello(name string) []byte { return frame(1, 0, append([]byte{1}, name...)) }

// Garbage, oversized frames, malformed ballot messages and unknown peers
// sent to a node's ballot port close that connection and disturb nothing:
// a lease held across the attack keeps renewing and the node keeps serving.
func TestBadInputIsRefused(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, tcp: true})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	target := c.nodes[0]
	l, err := c.nodes[1].Acquire(ctx, "precious")
	if err != nil {
		t.Fatal(err)
	}
	badReq := encodeRequest(&quorum.Request{Config: 1, From: "node2", Ops: []quorum.Op{{ID: 1, Kind: 9, Key: "k"}}})
	spoofed := encodeRequest(&quorum.Request{Config: 1, From: "node1", Ops: []quorum.Op{{ID: 1, Kind: quorum.OpPeek, Key: "k"}}})
	// msgpack arrays of one element, nested 10,000 deep.
	huge := bytes.Repeat([]byte{0x91}, 10000)
	cases := []struct {
		name string
		send []byte
	}{
		{"random bytes", []byte("GET / HTTP/1.1\r\nHost: lockmesh\r\n\r\n")},
		{"oversized length", binary.BigEndian.AppendUint32(nil, 1<<31)},
		{"unknown peer", append(hello("mallory"), frame(2, 1, spoofed)...)},
		{"garbage body", append(hello("node2"), frame(2, 1, []byte{kindRequest, 0xc1, 0xff, 0x00})...)},
		{"unknown kind", append(hello("node2"), frame(2, 1, []byte{77, 1, 2})...)},
		{"bad operation", append(hello("node2"), frame(2, 1, badReq)...)},
		{"spoofed sender", append(hello("node2"), frame(2, 1, spoofed)...)},
		{"deep nesting", append(hello("node2"), frame(2, 1, append([]byte{kindRequest}, huge...))...)},
	}
	for _, tc := range cases {
		conn, err := net.Dial("tcp", target.Status().RPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(tc.send)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the connection stayed open", tc.name)
		}
		conn.Close()
	}
	// Untouched: the lease still renews (its deadline moved on) and the
	// node still grants.
	before := l.Deadline()
	waitFor(t, 5*time.Second, "a renewal", func() bool { return l.Deadline().After(before) })
	if l.Err() != nil {
		t.Fatalf("the lease was disturbed: %v", l.Err())
	}
	l2, err := target.Acquire(ctx, "after")
	if err != nil {
		t.Fatalf("the attacked node no longer grants: %v", err)
	}
	l2.Release(ctx)
	l.Release(ctx)
}
