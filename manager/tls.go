package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lease"
)

// Who may do what, when ServerConfig.TLS is set (mutual TLS on every
// port). Every gRPC call needs a certificate the CA issued:
//
//	OwnerService/Lease      an owner, and only under the namespace and name
//	                        its certificate names (checked on every message)
//	xDS (Envoy, gRPC, Fuge Lookup streams)   a proxy, an admin or a manager
//	anything else           an admin or a manager
//
// Raft takes managers only. The admin API asks for a certificate but lets
// a client without one reach /healthz and /readyz (probes) and get a 401
// naming what is missing everywhere else; reads need any Fuge certificate,
// writes an admin's (or a manager's, for a join), or the admin token.

// ownerMethodPrefix is the owner protocol's gRPC service.
const ownerMethodPrefix = "/fuge.v1.OwnerService/"

// xdsMethodPrefix is every xDS service (ADS, delta ADS, CDS, ...).
const xdsMethodPrefix = "/envoy.service."

// peerIdentity is the Fuge ID of a gRPC call's peer. ok is false when the
// node runs without TLS.
func (s *Server) peerIdentity(ctx context.Context) (id fugetls.ID, ok bool, err error) {
	if s.cfg.TLS == nil {
		return fugetls.ID{}, false, nil
	}
	p, found := peer.FromContext(ctx)
	if !found {
		return fugetls.ID{}, true, fmt.Errorf("%w: no peer", fugetls.ErrNoIdentity)
	}
	ti, found := p.AuthInfo.(credentials.TLSInfo)
	if !found {
		return fugetls.ID{}, true, fmt.Errorf("%w: not a TLS connection", fugetls.ErrNoIdentity)
	}
	id, err = fugetls.PeerID(ti.State)
	return id, true, err
}

// authorize is the gRPC policy above, for every method but the owner
// protocol's name check (ownerService does that on each message).
func (s *Server) authorize(ctx context.Context, method string) error {
	id, on, err := s.peerIdentity(ctx)
	if !on {
		return nil
	}
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	var allow []fugetls.Role
	switch {
	case strings.HasPrefix(method, ownerMethodPrefix):
		allow = []fugetls.Role{fugetls.RoleOwner}
	case strings.HasPrefix(method, proxyMethodPrefix): // proxysvc.go checks the name
		allow = []fugetls.Role{fugetls.RoleProxy}
	case strings.HasPrefix(method, xdsMethodPrefix):
		allow = []fugetls.Role{fugetls.RoleProxy, fugetls.RoleAdmin, fugetls.RoleManager}
	default:
		allow = []fugetls.Role{fugetls.RoleAdmin, fugetls.RoleManager}
	}
	for _, r := range allow {
		if id.Role == r {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "manager: %v may not call %s (needs the role %v)", id, method, allow)
}

// checkOwner refuses an owner request whose namespace and name are not the
// ones the peer's certificate names.
func (s *Server) checkOwner(ctx context.Context, req lease.LeaseRequest) error {
	id, on, err := s.peerIdentity(ctx)
	if !on {
		return nil
	}
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	if want := fugetls.OwnerID(req.Namespace, req.Owner); id != want {
		return status.Errorf(codes.PermissionDenied, "manager: a session as %v needs a certificate naming it; this one names %v", want, id)
	}
	return nil
}

func (s *Server) unaryAuthz(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) streamAuthz(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// grpcOptions are the TLS and authorization options of the gRPC server.
func (s *Server) grpcOptions() []grpc.ServerOption {
	if s.cfg.TLS == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(s.cfg.TLS.ServerConfig(false))),
		grpc.ChainUnaryInterceptor(s.unaryAuthz),
		grpc.ChainStreamInterceptor(s.streamAuthz),
	}
}

// tlsStreamLayer is raft's transport over mutual TLS between managers.
type tlsStreamLayer struct {
	net.Listener
	adv    net.Addr
	client *tls.Config
}

func (l *tlsStreamLayer) Addr() net.Addr {
	if l.adv != nil {
		return l.adv
	}
	return l.Listener.Addr()
}

func (l *tlsStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(addr), l.client)
}

// raftTransport is raft's TCP transport, over mutual TLS when TLS is set.
func (s *Server) raftTransport(adv net.Addr, logger hclog.Logger) (*raft.NetworkTransport, error) {
	if s.cfg.TLS == nil {
		return raft.NewTCPTransportWithLogger(s.cfg.RaftAddr, adv, 3, 5*time.Second, logger)
	}
	ln, err := net.Listen("tcp", s.cfg.RaftAddr)
	if err != nil {
		return nil, err
	}
	layer := &tlsStreamLayer{
		Listener: tls.NewListener(ln, s.cfg.TLS.ServerConfig(false, fugetls.RoleManager)),
		adv:      adv,
		client:   s.cfg.TLS.ClientConfig(fugetls.RoleManager),
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 3, Timeout: 5 * time.Second, Logger: logger,
	}), nil
}

// httpScheme is the admin API's scheme.
func (s *Server) httpScheme() string {
	if s.cfg.TLS == nil {
		return "http"
	}
	return "https"
}

// adminClient is the client a node uses to call another member's admin
// API (the join probe, a join).
func (s *Server) adminClient(timeout time.Duration) *http.Client {
	c := &http.Client{Timeout: timeout}
	if s.cfg.TLS != nil {
		c.Transport = &http.Transport{TLSClientConfig: s.cfg.TLS.ClientConfig(fugetls.RoleManager)}
	}
	return c
}

// Admin API access levels.
type access int

const (
	accessOpen  access = iota // /healthz, /readyz
	accessRead                // any Fuge certificate or the token
	accessWrite               // an admin's certificate, a manager's (joins), or the token
)

// guard wraps the admin handler with the access level each request needs.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lvl := accessRead
		switch {
		case r.URL.Path == "/healthz" || r.URL.Path == "/readyz":
			lvl = accessOpen
		case r.Method != http.MethodGet && r.Method != http.MethodHead || strings.HasPrefix(r.URL.Path, "/debug/"):
			lvl = accessWrite
		}
		if msg := s.denied(r, lvl); msg != "" {
			code := http.StatusForbidden
			if strings.HasPrefix(msg, "401 ") {
				code, msg = http.StatusUnauthorized, msg[4:]
				w.Header().Set("WWW-Authenticate", `Bearer realm="fuge-manager"`)
			}
			writeJSON(w, code, apiError{Error: msg})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// crossOrigin reports whether r comes from a browser page whose origin is
// not this server's.
func crossOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err != nil || u.Host != r.Host
}

// denied says why r may not proceed at level lvl ("" when it may); a
// message starting with "401 " is a missing credential.
func (s *Server) denied(r *http.Request, lvl access) string {
	// A browser holding an admin's certificate must not be made to write
	// by another site (CSRF): a write from a page must come from the
	// dashboard's own origin. Clients that are not browsers send no Origin.
	if lvl == accessWrite && !s.cfg.UnsafeNoInputChecks && crossOrigin(r) {
		return "manager: a write from a page of another origin is refused (" + r.Header.Get("Origin") + ")"
	}
	if lvl == accessOpen || s.tokenOK(r) {
		return ""
	}
	tok := s.cfg.AdminToken != ""
	if s.cfg.TLS == nil {
		if lvl == accessWrite && tok {
			return "401 manager: this request needs the admin token (Authorization: Bearer, fugectl --token-file)"
		}
		return ""
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		m := "401 manager: this request needs a client certificate issued by the cluster's CA (fugectl --tls-dir DIR; make one with fugectl certs init DIR)"
		if tok {
			m += " or the admin token (fugectl --token-file)"
		}
		return m
	}
	id, err := fugetls.PeerID(*r.TLS)
	if err != nil {
		return "401 " + err.Error()
	}
	if lvl == accessWrite && id.Role != fugetls.RoleAdmin && !(id.Role == fugetls.RoleManager && r.URL.Path == "/v1/cluster/join") {
		return fmt.Sprintf("manager: %v may not change the cluster: this request needs an admin certificate (fugectl certs issue DIR --admin NAME) or the admin token", id)
	}
	return ""
}
