package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// The proxy stands in for tc netem where the kernel has no sch_netem. Each
// node advertises a port of the proxy as its gossip and ballot addresses, so
// every packet and stream between two nodes passes through it once: UDP
// packets are delayed (delay ± jitter, so they may be reordered) or dropped
// at the loss rate; TCP streams are cut into the chunks read from the
// socket, each delayed in order, and a chunk "lost" at the loss rate waits
// out a retransmission timeout as the kernel would (TCP itself never loses
// bytes).

// retransmitTimeout is Linux's minimum TCP retransmission timeout.
const retransmitTimeout = 200 * time.Millisecond

type proxy struct {
	mu     sync.Mutex
	delay  time.Duration
	jitter time.Duration
	loss   float64
	rng    *rand.Rand

	udpForwarded, udpDropped, tcpConns, tcpChunks, tcpStalled atomic.Int64
}

func runProxy(args []string) int {
	fs := flag.NewFlagSet("faultnode proxy", flag.ContinueOnError)
	listen := fs.String("listen", "", "IP address to listen on (required)")
	maps := fs.String("map", "", "comma-separated port=ip:port: what each port forwards to (UDP and TCP)")
	seed := fs.Int64("seed", 1, "random seed of delays and losses")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if net.ParseIP(*listen) == nil || *maps == "" {
		fmt.Fprintln(os.Stderr, "faultnode proxy: -listen IP and -map are required")
		return 2
	}
	p := &proxy{rng: rand.New(rand.NewSource(*seed))}
	for _, m := range list(*maps) {
		port, target, ok := strings.Cut(m, "=")
		if _, err := strconv.Atoi(port); !ok || err != nil {
			fmt.Fprintf(os.Stderr, "faultnode proxy: bad mapping %q\n", m)
			return 2
		}
		if err := p.forward(net.JoinHostPort(*listen, port), target); err != nil {
			fmt.Fprintf(os.Stderr, "faultnode proxy: %v\n", err)
			return 1
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.Encode(control.Reply{Event: control.EventStarted, Addr: *listen, Pid: os.Getpid()})
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 4096), maxLine)
	for sc.Scan() {
		var req control.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			enc.Encode(control.Reply{Err: control.ErrInvalid, Msg: err.Error()})
			continue
		}
		r := control.Reply{ID: req.ID}
		switch req.Op {
		case control.OpShape:
			if req.DelayMS < 0 || req.JitterMS < 0 || req.Loss < 0 || req.Loss > 1 {
				r.Err, r.Msg = control.ErrInvalid, "delay, jitter and loss must be non-negative, loss at most 1"
				break
			}
			p.mu.Lock()
			p.delay = time.Duration(req.DelayMS) * time.Millisecond
			p.jitter = time.Duration(req.JitterMS) * time.Millisecond
			p.loss = req.Loss
			p.mu.Unlock()
		case control.OpStats:
			r.Stats = &control.Stats{
				UDPForwarded: p.udpForwarded.Load(), UDPDropped: p.udpDropped.Load(),
				TCPConns: p.tcpConns.Load(), TCPChunks: p.tcpChunks.Load(), TCPStalled: p.tcpStalled.Load(),
			}
		default:
			r.Err, r.Msg = control.ErrInvalid, fmt.Sprintf("unknown op %q", req.Op)
		}
		enc.Encode(r)
	}
	return 0
}

// sample draws one packet's fate: how long it is held, and whether it is
// lost.
func (p *proxy) sample() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.delay
	if p.jitter > 0 {
		d += time.Duration(p.rng.Int63n(int64(2*p.jitter)+1)) - p.jitter
	}
	return max(d, 0), p.loss > 0 && p.rng.Float64() < p.loss
}

// forward relays UDP and TCP from addr to target.
func (p *proxy) forward(addr, target string) error {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	ut, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return err
	}
	uc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go p.relayUDP(uc, ut)
	go p.acceptTCP(ln, target)
	return nil
}

// relayUDP sends every packet arriving at c on to target, from c: the node
// behind the proxy sees the proxy's address as the sender, and memberlist
// answers the address a ping names, which is the sender's proxy port.
func (p *proxy) relayUDP(c *net.UDPConn, target *net.UDPAddr) {
	buf := make([]byte, 65536)
	for {
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		d, lost := p.sample()
		if lost {
			p.udpDropped.Add(1)
			continue
		}
		pkt := append([]byte(nil), buf[:n]...)
		time.AfterFunc(d, func() {
			if _, err := c.WriteToUDP(pkt, target); err == nil {
				p.udpForwarded.Add(1)
			}
		})
	}
}

func (p *proxy) acceptTCP(ln net.Listener, target string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			out, err := net.DialTimeout("tcp", target, 2*time.Second)
			if err != nil {
				in.Close()
				return
			}
			p.tcpConns.Add(1)
			var once sync.Once
			closeBoth := func() { once.Do(func() { in.Close(); out.Close() }) }
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(out, in, closeBoth) }()
			go func() { defer wg.Done(); p.pipe(in, out, closeBoth) }()
			wg.Wait()
			closeBoth()
		}()
	}
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk delayed, in order. At the end of src
// it half-closes dst; on a write error it closes both connections.
func (p *proxy) pipe(dst, src net.Conn, closeBoth func()) {
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				d, lost := p.sample()
				if lost {
					d += retransmitTimeout
					p.tcpStalled.Add(1)
				}
				due := time.Now().Add(d)
				if due.Before(last) {
					due = last
				}
				last = due
				chunks <- chunk{buf[:n], due}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(0)
	<-timer.C
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		if _, err := dst.Write(c.b); err != nil {
			closeBoth()
			for range chunks {
			}
			return
		}
		p.tcpChunks.Add(1)
	}
	if hc, ok := dst.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	} else {
		closeBoth()
	}
}
