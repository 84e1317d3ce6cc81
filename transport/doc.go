// Package transport carries lockmesh's ballot traffic between nodes: small
// request/reply exchanges (Call, or Go without waiting) and one-way notices
// (Send) with opaque
// byte bodies, which the caller encodes (lockmesh uses msgpack).
//
// memberlist's SendReliable dials a new TCP connection per message (about
// 240 µs on loopback); a quorum round needs tens of microseconds, so the
// ballots get this transport, and nodes advertise its address in their
// memberlist metadata.
//
// # Implementations
//
// TCP keeps persistent connections to each peer address (ConnsPerPeer of
// them, dialed lazily and redialed after a failure) and multiplexes calls
// over them by request id. Any number of goroutines may call at once.
//
//	cfg := transport.DefaultLocalTCPConfig() // or DefaultTCPConfig() in production
//	cfg.Name = "node-1"
//	cfg.Handler = myHandler                  // answers peers' requests
//	t, err := transport.NewTCP(cfg)
//	if err != nil { ... }
//	defer t.Close()
//	reply, err := t.Call(ctx, "node-2", peerAddr, body) // waits for the reply or ctx
//	err = t.Go("node-2", peerAddr, body, time.Second, func(reply []byte, err error) {
//		// the reply, or the error, on the connection's reader goroutine
//	})
//	err = t.Send("node-2", peerAddr, notice) // queues and returns
//
// The node name says who is expected at the address: with TLS the
// listener's certificate must name it (as a dialer's must name the node in
// its hello), so a reply comes from that node and no other.
//
// Network and MemTransport are an in-memory implementation for tests of
// code built on Transport, with reproducible fault injection: partitions,
// one-way cuts, loss, duplication, delay and the reordering it causes.
//
//	net := transport.NewNetwork(seed)
//	a, _ := net.Listen("a", handlerA)
//	b, _ := net.Listen("b", handlerB)
//	net.Partition([]string{"a"}, []string{"b"}) // a and b cannot talk
//	net.Heal()
//
// # Delivery
//
// Call, Go and Send are at most once: nothing is ever retransmitted once it
// may have reached the peer (what is said of Call here holds for Go, with
// the error done receives, and its timeout for the context). A Call that
// returns nil error ran the peer's
// handler exactly once. A Call that fails with ErrUnreachable,
// ErrFrameTooLarge or ErrQueueFull was not sent; one that fails with
// ErrConnClosed, ErrClosed (the local transport closed while it waited) or
// its context's error may or may not have run the handler: the caller must
// find out (lockmesh resolves such outcomes with a read: docs/design.md R31).
// A *RemoteError means the handler ran and failed. Nothing is promised
// about order.
//
// # Bad input
//
// Input from the network is never trusted. A frame longer than
// MaxFrameSize is refused from its length prefix, before its body is read;
// no allocation is sized by an unchecked length, and a body's buffer grows
// with the bytes that actually arrive. Anything malformed (short or
// unknown frames, a first frame that is not a valid hello within
// HandshakeTimeout, a frame type that the receiving side never expects)
// closes that connection only, is reported to TCPConfig.OnError, and leaves
// the listener and every other connection serving. A handler refuses a
// peer by returning an error wrapping ErrRejectPeer, which closes the
// peer's connection.
//
// Every resource a peer can make this node spend is bounded, each bound
// with its own error so that OnError can count it:
//
//   - a frame's size: MaxFrameSize (ErrFrameTooLarge);
//   - the time from a frame's first byte to its last: FrameTimeout, so a
//     peer trickling bytes is cut off (ErrSlowFrame);
//   - the time to complete the TLS handshake and the hello:
//     HandshakeTimeout (ErrHandshake with ErrTimeout);
//   - silence between frames: IdleTimeout (ErrIdle, a normal close);
//   - replies a peer leaves unread: MaxInflightPerConn, past which the
//     connection is not read until the writer catches up, and MaxQueuedBytes
//     (ErrInflightLimit, ErrQueueFull);
//   - connections: MaxInboundConns in all and MaxConnsPerPeer per node name
//     (ErrConnLimit);
//   - the bytes of frames held at once over all connections (bodies being
//     read or handled, replies not yet written): MaxBytesInFlight, so that
//     a flood of connections in names of their own (a hello only claims a
//     name without TLS) pins that much, not MaxInboundConns × MaxFrameSize
//     (ErrBudget).
//
// # Wire format
//
// A connection is a stream of frames:
//
//	+----------------+--------+----------------+-----------+
//	| length: uint32 | type:1 | id: uint64     | body      |
//	+----------------+--------+----------------+-----------+
//	  big endian       byte     big endian       length-9 bytes
//
// length counts the type, id and body (9 ≤ length ≤ MaxFrameSize). Types:
// 1 hello, 2 request, 3 reply, 4 error reply, 5 one-way message. The dialer
// opens with a hello (id 0) and then sends requests (fresh non-zero ids)
// and messages (id 0), without waiting. The listener sends only replies
// and error replies (body = the handler's error text), each carrying its
// request's id. A connection carries calls one way only; a node that is
// also called by its peer answers on the connection its peer dialed.
//
// A hello's body starts with its version. Version 1: then the dialer's node
// name (1 to 255 bytes of UTF-8 without control characters), and the
// listener answers nothing. Version 2 and later: then the name's length
// (one byte), the name, and the sender's payload (TCPConfig.Hello, at most
// MaxHelloPayload bytes, opaque to the transport); the listener answers
// with a version-2 hello of its own, its first frame, before judging the
// dialer's (TCPConfig.CheckHello), so that a dialer it refuses learns its
// payload. Every listener takes version 1; one that predates version 2
// refuses it, so a dialer opens with version 1 to a peer it knows to be
// that old (TCPConfig.HelloVersion).
//
// # Performance design
//
// Each dialed connection has one writer goroutine and one reader
// goroutine. Callers append encoded frames to the connection's queue under
// a mutex; the writer takes the whole queue and writes it with one system
// call, so frames queued during a write are coalesced into the next one.
// Callers never block on the socket, and a Call whose context ends returns
// at once; its late reply is skipped by the reader without being buffered.
// An accepted connection's reader runs the handler inline (handlers must
// be fast) and queues the reply to that connection's writer. TCP_NODELAY
// is set. A Call allocates only its reply body; call records and their
// channels are pooled. A Go allocates its call record and a timer, and its
// reply is handed to done on the reader goroutine: a caller that waits for
// a majority of several replies needs no goroutine per call, and no
// goroutine is woken to take each reply.
//
// A listener closes connections idle for IdleTimeout; a dialer stops using
// a connection it has not sent on for half of its IdleTimeout, so that it
// rarely sends a request into a connection the listener is closing.
//
// # TLS
//
// With TCPConfig.TLS set, the listener and every dial use TLS with that
// configuration (certificates, roots, and ClientAuth/ClientCAs for mutual
// TLS). When a dialer presents a client certificate, the node name in its
// hello must be one the certificate vouches for — by default one of its DNS
// subject alternative names, or whatever TCPConfig.VerifyPeerName decides —
// or the connection is closed with ErrIdentity: the "from" a Handler sees is
// then authenticated. Without client certificates it is only a claim. The
// other way round, a connection dialed to a node is used only if the
// listener's certificate vouches for that node by the same rule (the
// handshake fails with ErrIdentity otherwise): a member whose address was
// handed out as another member's cannot answer in that one's name.
package transport
