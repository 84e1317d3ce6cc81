package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// ErrInvalidConfig is wrapped by every error TCPConfig.Validate returns.
var ErrInvalidConfig = errors.New("transport: invalid config")

// Defaults used by DefaultTCPConfig and for zero-valued fields.
const (
	DefaultPort             = 7947 // next to memberlist's 7946
	DefaultMaxFrameSize     = 4 << 20
	DefaultConnsPerPeer     = 1
	DefaultMaxQueuedBytes   = 16 << 20
	DefaultDialTimeout      = 5 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultFrameTimeout     = 10 * time.Second
	DefaultMaxInflight      = 256
	DefaultMaxConnsPerPeer  = 16
	DefaultMaxInboundConns  = 1024
	DefaultMaxBytesInFlight = 64 << 20
	maxConnsPerPeer         = 64
	maxInflightLimit        = 1 << 20
	maxInboundConnsLimit    = 1 << 20
	maxBytesInFlightLimit   = 1 << 40
)

// TCPConfig configures a TCP transport. Start from DefaultTCPConfig or
// DefaultLocalTCPConfig, set Name and Handler, and adjust. Zero-valued
// numeric fields take the documented default; negative values are invalid.
type TCPConfig struct {
	// Name is this node's name, sent in the hello that opens every
	// connection this transport dials, and passed to the peer's Handler as
	// "from". 1 to 255 bytes of UTF-8 without control characters. Required.
	Name string

	// BindAddr is the "host:port" to listen on. Port 0 picks a free port;
	// Addr then reports the real one. Required: there is no implicit
	// address.
	BindAddr string

	// AdvertiseAddr is the "host:port" peers should dial to reach this
	// node, reported by Addr. Set it when BindAddr is a wildcard or behind
	// NAT. Empty means the listener's own address.
	AdvertiseAddr string

	// Handler receives requests and messages from peers. Required.
	Handler Handler

	// MaxFrameSize bounds a frame's length N (type byte + 8-byte id + body),
	// in bytes, in both directions: a body may be at most MaxFrameSize-9
	// bytes. A peer announcing a longer frame is disconnected. Peers should
	// use the same value. Range 1 KiB to 1 GiB; zero means
	// DefaultMaxFrameSize (4 MiB).
	MaxFrameSize int

	// ConnsPerPeer is the number of connections kept to each peer address;
	// calls are spread over them round-robin. More than one helps only when
	// a single connection's reader or writer goroutine is the bottleneck.
	// Range 1 to 64; zero means DefaultConnsPerPeer (1).
	ConnsPerPeer int

	// MaxQueuedBytes bounds, in bytes, the frames waiting to be written on
	// one connection; Call and Send fail with ErrQueueFull beyond it. Must be
	// at least MaxFrameSize+4. Zero means DefaultMaxQueuedBytes (16 MiB), or
	// MaxFrameSize+4 if that is larger.
	MaxQueuedBytes int

	// DialTimeout bounds connecting to a peer, including the TLS handshake.
	// Calls queued on a connection that fails to open fail with
	// ErrUnreachable. Zero means DefaultDialTimeout (5 s).
	DialTimeout time.Duration

	// WriteTimeout closes a connection when a write cannot make progress
	// for this long (the peer stopped reading, or the network is gone).
	// Deadlines are moved lazily, so a stalled write is detected after
	// between half of and all of WriteTimeout. Zero means
	// DefaultWriteTimeout (10 s).
	WriteTimeout time.Duration

	// IdleTimeout closes an accepted connection that has received no frame
	// for this long. A dialer stops using a connection it has not sent on
	// for half of its own IdleTimeout, so that it rarely sends on one the
	// listener is closing; peers should therefore use the same value. Zero
	// means DefaultIdleTimeout (2 min).
	IdleTimeout time.Duration

	// HandshakeTimeout bounds, on an accepted connection, the time until a
	// valid hello (and, with TLS, the TLS handshake) has been received; the
	// connection is closed otherwise. Zero means DefaultHandshakeTimeout
	// (5 s).
	HandshakeTimeout time.Duration

	// FrameTimeout bounds, on accepted and dialed connections alike, the
	// time from a frame's first byte to its last. A peer that sends a header
	// and then trickles the body, a byte now and then, is cut off with
	// ErrSlowFrame instead of holding the connection (and the memory of a
	// half-read frame) for as long as it likes. Frames that arrive in one
	// piece cost nothing: the deadline is only armed when a frame is not
	// already buffered. Keep it above MaxFrameSize divided by the slowest
	// link's bandwidth (4 MiB at 1 MB/s takes 4 s). Zero means
	// DefaultFrameTimeout (10 s).
	FrameTimeout time.Duration

	// MaxInflightPerConn bounds, on an accepted connection, the requests
	// whose replies are not yet written to the socket. At the bound the
	// connection's reader stops reading (the peer's next frames wait in the
	// TCP buffers) until the writer catches up, so a peer that sends
	// requests without reading the replies makes this node hold at most
	// this many replies (and at most MaxQueuedBytes); its connection is
	// closed with ErrInflightLimit once a write makes no progress for
	// WriteTimeout. A well-behaved peer only ever slows down. Range 1 to
	// 2^20; zero means DefaultMaxInflight (256).
	MaxInflightPerConn int

	// MaxConnsPerPeer bounds the accepted connections open at once from one
	// node (as named by its hello). One more is closed with ErrConnLimit
	// right after its hello. Peers replacing an idle connection hold two
	// for a moment, so keep it at least twice the peers' ConnsPerPeer.
	// Range 1 to 2^20; zero means DefaultMaxConnsPerPeer (16).
	MaxConnsPerPeer int

	// MaxInboundConns bounds the accepted connections open at once,
	// including those still in their TLS handshake or hello. One more is
	// closed with ErrConnLimit as soon as it is accepted. Each costs a
	// goroutine and a 16 KiB read buffer. Range 1 to 2^20; zero means
	// DefaultMaxInboundConns (1024).
	MaxInboundConns int

	// MaxBytesInFlight bounds, in bytes, the frames this transport holds
	// at once across all its connections: a request's or message's body from
	// the moment its header is read until its handler returns, a reply
	// queued on an accepted connection until it is written, and a reply
	// read on a dialed connection until it is handed to its caller. A body
	// that does not fit is not read (its sender is held back by TCP) until
	// others are done; one that still does not fit when its FrameTimeout
	// runs out, or a reply that does not fit when it is queued, closes its
	// connection with ErrBudget. So a flood of connections pins at most this
	// much, plus a read buffer per connection, instead of MaxInboundConns ×
	// MaxFrameSize. Range MaxFrameSize to 2^40; zero means
	// DefaultMaxBytesInFlight (64 MiB), or MaxFrameSize if that is larger.
	MaxBytesInFlight int

	// TLS, if set, makes both the listener and every dial use TLS with this
	// configuration: Certificates serve as the server certificate and, if
	// the peer asks, the client certificate; RootCAs verify peers' server
	// certificates; ClientAuth and ClientCAs enable mutual TLS. The
	// transport clones it and never modifies it. Nil means plain TCP.
	//
	// When the peer of an accepted connection presents a certificate, the
	// node name in its hello must be one that certificate vouches for (see
	// VerifyPeerName); otherwise the connection is closed with ErrIdentity.
	// Without client certificates, names are not authenticated.
	TLS *tls.Config

	// VerifyPeerName decides whether cert, the leaf certificate a TLS peer
	// presented (already verified by the TLS configuration), vouches for the
	// node name the peer sent in its hello. Return nil to accept. Nil means
	// the default rule: name must equal one of the certificate's DNS
	// subject alternative names, byte for byte. The Common Name is not
	// considered (as crypto/tls stopped doing for host names in Go 1.15).
	// Set it to bind names some other way, a URI SAN for example. It is
	// called on the connection's goroutine and must not block.
	VerifyPeerName func(name string, cert *x509.Certificate) error

	// Hello is what this node says of itself in its hellos beyond its
	// name: at most MaxHelloPayload bytes, carried as they are, that the
	// peer's CheckHello judges. It goes in every hello of version 2: those
	// this transport opens connections with, and those it answers a
	// dialer's version-2 hello with. Nil means an empty payload.
	Hello []byte

	// CheckHello, if set, judges a peer by its hello, once per connection
	// and before anything else is taken from it: on an accepted connection
	// the dialer's hello, on a dialed one the hello the listener answers a
	// version-2 hello with (a version-1 hello gets no answer, so there is
	// nothing to judge). peer is the name the dialer's hello gave, or the
	// node dialed; version is the hello's version (1: the peer predates
	// payloads, and payload is nil). A non-nil error closes the connection:
	// it is reported to OnError wrapped with ErrHandshake, and on a dialed
	// connection the calls queued on it fail with it (ErrConnClosed: the
	// listener did not handle them, but cannot say so). A listener answers
	// before it judges, so a dialer it refuses can tell why. It runs on
	// the connection's goroutine and must not block; the transport keeps no
	// reference to payload.
	CheckHello func(peer string, version int, payload []byte) error

	// HelloVersion, if set, returns the version of the hello to open a
	// connection to node with: 1 for a peer known to predate version 2
	// (which refuses a later hello), 2 otherwise. It is called before each
	// dial, and must not block. Nil means 2 when Hello or CheckHello is
	// set, and 1 otherwise (the transport's first protocol, exactly).
	HelloVersion func(node string) int

	// OnError, if set, is told about every connection closed for a reason
	// other than an orderly close or Close: rejected frames, failed
	// handshakes, peers rejected by the handler, limits tripped (the error
	// then wraps ErrFrameTooLarge, ErrSlowFrame, ErrInflightLimit,
	// ErrConnLimit or ErrQueueFull), write timeouts, I/O errors. It is also
	// told, with ErrIdle, about accepted connections closed for idling,
	// which is normal and may be counted rather than logged.
	// peer is the remote node's name once its hello has been read, and
	// otherwise the remote network address. It is called from connection
	// goroutines, possibly concurrently, and must not block. Nil means
	// nobody is told. Failures of Call are returned to its caller and are
	// not reported here.
	OnError func(peer string, err error)
}

// DefaultTCPConfig returns a configuration for a production node: it
// listens on all interfaces at DefaultPort and is named after the host.
// Handler must still be set.
func DefaultTCPConfig() TCPConfig {
	name, _ := os.Hostname()
	return TCPConfig{
		Name:               name,
		BindAddr:           fmt.Sprintf("0.0.0.0:%d", DefaultPort),
		MaxFrameSize:       DefaultMaxFrameSize,
		ConnsPerPeer:       DefaultConnsPerPeer,
		MaxQueuedBytes:     DefaultMaxQueuedBytes,
		DialTimeout:        DefaultDialTimeout,
		WriteTimeout:       DefaultWriteTimeout,
		IdleTimeout:        DefaultIdleTimeout,
		HandshakeTimeout:   DefaultHandshakeTimeout,
		FrameTimeout:       DefaultFrameTimeout,
		MaxInflightPerConn: DefaultMaxInflight,
		MaxConnsPerPeer:    DefaultMaxConnsPerPeer,
		MaxInboundConns:    DefaultMaxInboundConns,
		MaxBytesInFlight:   DefaultMaxBytesInFlight,
	}
}

// DefaultLocalTCPConfig returns a configuration for nodes on one machine
// (tests, examples): loopback, a free port, and shorter timeouts.
func DefaultLocalTCPConfig() TCPConfig {
	c := DefaultTCPConfig()
	c.BindAddr = "127.0.0.1:0"
	c.DialTimeout = time.Second
	c.WriteTimeout = 2 * time.Second
	c.HandshakeTimeout = time.Second
	return c
}

// Validate reports the first problem with c, wrapping ErrInvalidConfig. It
// neither modifies c nor panics.
func (c *TCPConfig) Validate() error {
	if c == nil {
		return fmt.Errorf("%w: nil config", ErrInvalidConfig)
	}
	if err := checkName(c.Name); err != nil {
		return fmt.Errorf("%w: Name: %w", ErrInvalidConfig, err)
	}
	if c.BindAddr == "" {
		return fmt.Errorf("%w: BindAddr is empty", ErrInvalidConfig)
	}
	if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("%w: BindAddr: %w", ErrInvalidConfig, err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("%w: AdvertiseAddr: %w", ErrInvalidConfig, err)
		}
	}
	if c.Handler == nil {
		return fmt.Errorf("%w: Handler is nil", ErrInvalidConfig)
	}
	if c.MaxFrameSize != 0 && (c.MaxFrameSize < minFrameSize || c.MaxFrameSize > maxFrameSizeLimit) {
		return fmt.Errorf("%w: MaxFrameSize %d outside [%d, %d]", ErrInvalidConfig, c.MaxFrameSize, minFrameSize, maxFrameSizeLimit)
	}
	if c.ConnsPerPeer < 0 || c.ConnsPerPeer > maxConnsPerPeer {
		return fmt.Errorf("%w: ConnsPerPeer %d outside [1, %d]", ErrInvalidConfig, c.ConnsPerPeer, maxConnsPerPeer)
	}
	if len(c.Hello) > MaxHelloPayload {
		return fmt.Errorf("%w: Hello of %d bytes (limit %d)", ErrInvalidConfig, len(c.Hello), MaxHelloPayload)
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
		return fmt.Errorf("%w: TLS has neither Certificates nor GetCertificate: the listener could not serve", ErrInvalidConfig)
	}
	for _, l := range []struct {
		name     string
		v, limit int
	}{
		{"MaxInflightPerConn", c.MaxInflightPerConn, maxInflightLimit},
		{"MaxConnsPerPeer", c.MaxConnsPerPeer, maxInboundConnsLimit},
		{"MaxInboundConns", c.MaxInboundConns, maxInboundConnsLimit},
	} {
		if l.v < 0 || l.v > l.limit {
			return fmt.Errorf("%w: %s %d outside [1, %d]", ErrInvalidConfig, l.name, l.v, l.limit)
		}
	}
	maxFrame := c.MaxFrameSize
	if maxFrame == 0 {
		maxFrame = DefaultMaxFrameSize
	}
	if c.MaxQueuedBytes < 0 || (c.MaxQueuedBytes != 0 && c.MaxQueuedBytes < maxFrame+lengthPrefixSize) {
		return fmt.Errorf("%w: MaxQueuedBytes %d below MaxFrameSize+4 (%d)", ErrInvalidConfig, c.MaxQueuedBytes, maxFrame+lengthPrefixSize)
	}
	if c.MaxBytesInFlight != 0 && (c.MaxBytesInFlight < maxFrame || c.MaxBytesInFlight > maxBytesInFlightLimit) {
		return fmt.Errorf("%w: MaxBytesInFlight %d outside [MaxFrameSize (%d), %d]", ErrInvalidConfig, c.MaxBytesInFlight, maxFrame, maxBytesInFlightLimit)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DialTimeout", c.DialTimeout},
		{"WriteTimeout", c.WriteTimeout},
		{"IdleTimeout", c.IdleTimeout},
		{"HandshakeTimeout", c.HandshakeTimeout},
		{"FrameTimeout", c.FrameTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s is negative (%v)", ErrInvalidConfig, d.name, d.v)
		}
	}
	return nil
}

// withDefaults returns a copy of c with zero fields replaced by defaults.
func (c TCPConfig) withDefaults() TCPConfig {
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = DefaultMaxFrameSize
	}
	if c.ConnsPerPeer == 0 {
		c.ConnsPerPeer = DefaultConnsPerPeer
	}
	if c.MaxQueuedBytes == 0 {
		c.MaxQueuedBytes = max(DefaultMaxQueuedBytes, c.MaxFrameSize+lengthPrefixSize)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = DefaultFrameTimeout
	}
	if c.MaxInflightPerConn == 0 {
		c.MaxInflightPerConn = DefaultMaxInflight
	}
	if c.MaxConnsPerPeer == 0 {
		c.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	if c.MaxInboundConns == 0 {
		c.MaxInboundConns = DefaultMaxInboundConns
	}
	if c.MaxBytesInFlight == 0 {
		c.MaxBytesInFlight = max(DefaultMaxBytesInFlight, c.MaxFrameSize)
	}
	if c.TLS != nil {
		c.TLS = c.TLS.Clone()
	}
	return c
}
