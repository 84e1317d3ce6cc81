package transport_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/lockmesh/lockmesh/transport"
)

// acceptor answers ballots; a real one decodes msgpack bodies.
type acceptor struct{}

func (acceptor) HandleRequest(from string, body []byte) ([]byte, error) {
	return []byte("promise to " + from + " for " + string(body)), nil
}

func (acceptor) HandleMessage(from string, body []byte) {}

func ExampleNewTCP() {
	newNode := func(name string) *transport.TCP {
		cfg := transport.DefaultLocalTCPConfig() // loopback, free port
		cfg.Name = name
		cfg.Handler = acceptor{}
		t, err := transport.NewTCP(cfg)
		if err != nil {
			log.Fatal(err)
		}
		return t
	}
	a, b := newNode("a"), newNode("b")
	defer a.Close()
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	reply, err := a.Call(ctx, "", b.Addr(), []byte("ballot 7"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(reply))
	// Output: promise to a for ballot 7
}

func ExampleNetwork() {
	net := transport.NewNetwork(1) // the seed makes faults reproducible
	a, _ := net.Listen("a", acceptor{})
	b, _ := net.Listen("b", acceptor{})
	defer a.Close()
	defer b.Close()

	reply, err := a.Call(context.Background(), "", "b", []byte("ballot 7"))
	fmt.Println(string(reply), err)

	net.Partition([]string{"a"}, []string{"b"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = a.Call(ctx, "", "b", []byte("ballot 8"))
	fmt.Println(err)

	net.Heal()
	reply, err = a.Call(context.Background(), "", "b", []byte("ballot 9"))
	fmt.Println(string(reply), err)
	// Output:
	// promise to a for ballot 7 <nil>
	// context deadline exceeded
	// promise to a for ballot 9 <nil>
}
