package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lockmesh/lockmesh/transport"
)

// Limits on what is read from the network, and how their trips are told.
//
// Each limit, when it trips, closes the connection that carried the input,
// is logged (rate-limited, so that a flood of bad input cannot flood the
// log) and counts one metric:
//
//	limit.frame_size   a frame longer than MaxFrameSize
//	limit.slow_frame   a frame not received whole within FrameTimeout
//	limit.handshake    no TLS handshake and hello within HandshakeTimeout
//	limit.inflight     MaxInflightPerConn replies left unread
//	limit.queue        a connection's reply queue full (MaxQueuedBytes)
//	limit.conns        MaxConnsPerPeer or MaxInboundConns reached
//	limit.memory       MaxBytesInFlight full: a frame or reply refused
//	limit.idle         a connection idle for IdleTimeout (normal; debug log)
//	limit.ops          more than MaxOpsPerMessage operations or keys
//	limit.key_length   a key longer than MaxKeyLength
//	limit.value        a lease value longer than MaxValueSize
//	limit.depth        msgpack nested deeper than a message can be
//
// Refused connections count transport.refused and one of
// transport.refused.<reason>: plaintext (a client not speaking TLS),
// tls_unknown_ca (a certificate from another CA), tls_expired,
// tls_bad_cert (any other certificate fault), tls_no_cert, tls_alert (the
// peer refused our handshake), identity (a hello naming a node the
// certificate does not), handshake (any other TLS or hello failure),
// malformed (bad frames), rejected (the handler refused the peer: see
// rpc.*), write_timeout, io. Refused messages count rpc.malformed,
// rpc.unknown_peer or rpc.wrong_config; connections refused for a peer's
// settings, rpc.refused_settings (settings.go).

// checkUserKey checks a key a caller passed: one the limits allow, and not
// one of the mesh's own registers (those start with a zero byte). Its
// errors wrap ErrInvalidKey, say what is wrong in the caller's terms, and
// quote at most the key's first keyQuote bytes.
func (l limits) checkUserKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(k) > l.MaxKeyLen:
		return fmt.Errorf("%w %s: %d bytes, longer than MaxKeyLength (%d)", ErrInvalidKey, quoteKey(k), len(k), l.MaxKeyLen)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w %s: not UTF-8", ErrInvalidKey, quoteKey(k))
	case k[0] == 0:
		return fmt.Errorf("%w %s: keys starting with a zero byte are the mesh's own", ErrInvalidKey, quoteKey(k))
	}
	return nil
}

// keyQuote is how much of a key an error quotes.
const keyQuote = 40

// quoteKey quotes k for an error, cut to keyQuote bytes (on a character
// boundary) with an ellipsis when longer.
func quoteKey(k string) string {
	if len(k) <= keyQuote {
		return strconv.Quote(k)
	}
	cut := keyQuote
	for cut > 0 && !utf8.RuneStart(k[cut]) {
		cut--
	}
	return strconv.Quote(k[:cut]) + "…"
}

// countLimit counts a refused message's limit, if it tripped one, and
// returns the metric's name ("" if none).
func (m *Mesh) countLimit(err error) string {
	var metric string
	switch {
	case errors.Is(err, errTooManyOps):
		metric = "limit.ops"
	case errors.Is(err, errKeyTooLong):
		metric = "limit.key_length"
	case errors.Is(err, errTooDeep):
		metric = "limit.depth"
	case errors.Is(err, errValueLarge):
		metric = "limit.value"
	default:
		return ""
	}
	m.incr(metric, 1)
	return metric
}

// refusal classifies an error the ballot transport reported: the metric
// to count and a sentence for the log.
func refusal(err error) (metric, why string) {
	var (
		record  tls.RecordHeaderError
		remote  *net.OpError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, transport.ErrIdle):
		return "limit.idle", "closed an idle connection"
	case errors.Is(err, transport.ErrUnresponsive):
		return "transport.unresponsive", "the peer stopped answering; the next call dials a new connection"
	case errors.Is(err, transport.ErrFrameTooLarge):
		return "limit.frame_size", "the peer sent a frame over MaxFrameSize"
	case errors.Is(err, transport.ErrSlowFrame):
		return "limit.slow_frame", "the peer did not send a whole frame within FrameTimeout (trickling bytes?)"
	case errors.Is(err, transport.ErrInflightLimit):
		return "limit.inflight", "the peer left MaxInflightPerConn replies unread"
	case errors.Is(err, transport.ErrQueueFull):
		return "limit.queue", "the peer left its reply queue full"
	case errors.Is(err, transport.ErrConnLimit):
		return "limit.conns", "too many connections (MaxConnsPerPeer or MaxInboundConns)"
	case errors.Is(err, transport.ErrBudget):
		return "limit.memory", "no room left in MaxBytesInFlight (many large frames at once: a flood?)"
	case errors.Is(err, transport.ErrIdentity) && errors.Is(err, transport.ErrUnreachable):
		return "transport.refused.identity", "the listener's certificate does not name the node dialed (a poisoned address?)"
	case errors.Is(err, transport.ErrIdentity):
		return "transport.refused.identity", "the peer's hello names a node its certificate does not name"
	case errors.As(err, &record):
		return "transport.refused.plaintext", "the peer does not speak TLS"
	case errors.As(err, &unknown):
		return "transport.refused.tls_unknown_ca", "the peer's certificate is not signed by this mesh's CA"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "transport.refused.tls_expired", "the peer's certificate has expired (or is not valid yet)"
	case errors.As(err, &invalid), errors.Is(err, errPeerCertificate):
		return "transport.refused.tls_bad_cert", "the peer's certificate is not acceptable"
	case errors.As(err, &remote) && remote.Op == "remote error": // crypto/tls's way to pass on the peer's alert
		return "transport.refused.tls_alert", "the peer refused the TLS handshake: it does not trust this node's certificate"
	case strings.Contains(errText(err), "didn't provide a certificate"):
		return "transport.refused.tls_no_cert", "the peer presented no certificate"
	case errors.Is(err, transport.ErrHandshake) && errors.Is(err, transport.ErrTimeout):
		return "limit.handshake", "no TLS handshake and hello within HandshakeTimeout"
	case errors.Is(err, transport.ErrHandshake):
		return "transport.refused.handshake", "the connection did not open properly"
	case errors.Is(err, transport.ErrMalformedFrame):
		return "transport.refused.malformed", "the peer sent a malformed frame"
	case errors.Is(err, transport.ErrRejectPeer):
		return "transport.refused.rejected", "refused the peer's messages"
	case errors.Is(err, transport.ErrTimeout):
		return "transport.refused.write_timeout", "the peer stopped reading"
	}
	return "transport.refused.io", "the connection failed"
}

// transportRefused is the ballot transport's OnError: it counts and logs
// each connection closed for a fault or a limit.
func (m *Mesh) transportRefused(peer string, err error) {
	if errors.Is(err, errSettings) {
		// judge counted and logged it (rpc.refused_settings).
		m.log.Debug("ballot connection closed", "peer", peer, "error", err)
		return
	}
	metric, why := refusal(err)
	m.incr(metric, 1)
	switch metric {
	case "limit.idle":
		m.log.Debug("ballot connection closed", "peer", peer, "why", why)
		return
	case "transport.unresponsive":
		m.log.Info("ballot connection given up", "peer", peer, "why", why)
		return
	case "transport.refused.rejected":
		// The handler logged why.
		m.log.Debug("ballot connection closed", "peer", peer, "why", why, "error", err)
		return
	case "transport.refused.io":
		// A peer that stops or restarts resets its connections: routine
		// for a moment, worth a look if it goes on.
		m.logRefusal(metric+" "+hostOf(peer), "ballot connection failed", "peer", peer, "why", why, "error", err)
		return
	}
	if m.noisy.allow(metric + " " + hostOf(peer)) {
		m.log.Warn("ballot connection refused", "peer", peer, "why", why, "metric", metric, "error", err)
	}
}

// callFailed is told about every ballot call that failed. A peer whose
// certificate this node refuses is worth a warning; the rest (timeouts,
// peers down) are the protocol's business.
func (m *Mesh) callFailed(addr string, err error) {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var remote *transport.RemoteError
	if errors.As(err, &remote) && strings.Contains(remote.Message, errWrongIncarnation.Error()) {
		m.incr("rpc.refused_incarnation", 1)
		m.logRefusal("refused incarnation "+hostOf(addr),
			"a peer refuses this process's ballots: it knows this node's name as another process (this node restarted moments ago, or another process uses its name)",
			"peer", addr, "error", err)
		return
	}
	if errors.Is(err, errSettings) || (!errors.Is(err, errPeerCertificate) && !errors.As(err, &unknown) && !errors.As(err, &invalid) && !errors.Is(err, transport.ErrIdentity)) {
		m.log.Debug("ballot call failed", "peer", addr, "error", err)
		return
	}
	metric, why := refusal(err)
	m.incr(metric, 1)
	if m.noisy.allow(metric + " " + hostOf(addr)) {
		m.log.Warn("refusing to send ballots to a peer", "peer", addr, "why", why, "metric", metric, "error", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// hostOf strips the port, so that rate-limiting by peer treats every
// connection from one host alike.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
