package meshtest

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// gossipLink is one node's gossip transport: memberlist's own, on
// loopback, through which the node sends nothing while the cluster has it
// cut off (or the node it sends to). Every node of the cluster sends
// through one, so checking the sender's side cuts both directions.
type gossipLink struct {
	memberlist.NodeAwareTransport
	c    *Cluster
	name string
}

var _ memberlist.NodeAwareTransport = (*gossipLink)(nil)

// WriteTo loses the packet when cut off, as UDP would.
func (g *gossipLink) WriteTo(b []byte, addr string) (time.Time, error) {
	return g.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (g *gossipLink) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if g.c.cutOff(g.name, a) {
		return time.Now(), nil
	}
	return g.NodeAwareTransport.WriteToAddress(b, a)
}

// DialTimeout fails when cut off, as a connection that nobody answers
// would (at once: a test need not wait out the timeout).
func (g *gossipLink) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return g.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (g *gossipLink) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if g.c.cutOff(g.name, a) {
		return nil, fmt.Errorf("meshtest: %s cannot reach %s: cut off", g.name, a)
	}
	return g.NodeAwareTransport.DialAddressTimeout(a, timeout)
}
