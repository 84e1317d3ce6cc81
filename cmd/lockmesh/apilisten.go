package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Where the HTTP API listens, and who may use each listener
// (docs/agent.md, "Listeners"):
//
//   - the unix socket -api-socket, with -socket-mode's permissions: its
//     file permissions are its access control, so a request without a
//     token may do anything (unless socket_requires_token), and one with a
//     token is held to that token's rules;
//   - TCP at -api-addr, with TLS unless -api-tls off: once any token is
//     configured every request needs one; with none configured, anyone who
//     reaches it may do anything, so the agent refuses to listen anywhere
//     but on a loopback address unless -api-open says so.

// apiPlan is the API's listeners as the settings describe them.
type apiPlan struct {
	limits     apiLimits
	acl        *acl
	socket     string // "" for none
	socketAnon bool
	addr       string // "" for none
	tlsConfig  *tls.Config
	tcpAnon    bool

	servers []*http.Server
	closers []func()
}

func planAPI(f agentFlags, file agentFile, log hclog.Logger) (*apiPlan, error) {
	p := &apiPlan{limits: defaultAPILimits()}
	if file.Limits != nil {
		p.limits = *file.Limits
	}
	var err error
	if p.acl, err = loadACL(file.Tokens, log, os.LookupEnv, os.ReadFile); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	noTokens := len(p.acl.tokens) == 0
	switch f.apiSocket {
	case "off":
	case "":
		p.socket = defaultAPISocket(f.socket)
	default:
		p.socket = f.apiSocket
	}
	p.socketAnon = noTokens || !file.SocketRequiresToken
	if f.apiAddr == "" {
		return p, nil
	}
	p.addr = f.apiAddr
	ip, _, err := splitHostPort("-api-addr", f.apiAddr, true)
	if err != nil {
		return nil, err
	}
	if noTokens && !ip.IsLoopback() && !f.apiOpen {
		return nil, fmt.Errorf("-api-addr %s is not a loopback address and no token is configured: anyone who reaches it could take and release every lock. "+
			"Configure tokens (-config), listen on 127.0.0.1, or give -api-open to allow it", f.apiAddr)
	}
	p.tcpAnon = noTokens
	p.tlsConfig, err = apiTLS(f)
	return p, err
}

// defaultAPISocket is beside the socket protocol's: lockmesh.sock →
// lockmesh-http.sock.
func defaultAPISocket(socket string) string {
	if base, ok := strings.CutSuffix(socket, ".sock"); ok {
		return base + "-http.sock"
	}
	return socket + ".http"
}

// apiTLS is the TLS configuration of -api-addr, nil for none.
func apiTLS(f agentFlags) (*tls.Config, error) {
	cert, key := f.apiTLSCert, f.apiTLSKey
	switch {
	case f.apiTLS == "off":
		return nil, nil
	case f.apiTLS != "auto":
		return nil, fmt.Errorf("-api-tls %q: want auto or off", f.apiTLS)
	case (cert == "") != (key == ""):
		return nil, errors.New("-api-tls-cert and -api-tls-key go together")
	case cert == "" && f.tlsCert != "":
		cert, key = f.tlsCert, f.tlsKey
	case cert == "":
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("the API's certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// listen starts the listeners and returns their addresses ("off" for
// none).
func (p *apiPlan) listen(api *httpAPI, mode os.FileMode) (socket, addr string, err error) {
	socket, addr = "off", "off"
	if p.socket != "" {
		ln, err := listenSocket(p.socket, mode)
		if err != nil {
			return "", "", fmt.Errorf("-api-socket: %w", err)
		}
		p.serve(api, ln, p.socketAnon)
		socket = p.socket
	}
	if p.addr != "" {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			p.close()
			return "", "", fmt.Errorf("-api-addr: %w", err)
		}
		addr = ln.Addr().String()
		if p.tlsConfig != nil {
			ln = tls.NewListener(ln, p.tlsConfig)
			addr = "https://" + addr
		} else {
			addr = "http://" + addr
		}
		p.serve(api, ln, p.tcpAnon)
	}
	return socket, addr, nil
}

func (p *apiPlan) serve(api *httpAPI, ln net.Listener, anonymous bool) {
	hs := api.server(anonymous)
	p.servers = append(p.servers, hs)
	go hs.Serve(limitListen(ln, api.lim.MaxConns))
}

// close stops the listeners and their connections.
func (p *apiPlan) close() {
	for _, hs := range p.servers {
		hs.Close()
	}
	p.servers = nil
}

// close ends the API: new sessions are refused, and every session ends
// (its leases released) within releaseTimeout.
func (a *httpAPI) close() {
	a.closing.Store(true)
	done := make(chan struct{})
	go func() {
		a.sess.closeAll()
		close(done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout+time.Second)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
