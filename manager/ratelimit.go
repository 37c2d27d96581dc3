package manager

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
)

// Owner sessions opened per client: a token bucket per client (its
// certificate's ID under TLS, its IP address otherwise), so that one
// client cannot make the leader spend its time on registrations.
const (
	// DefaultSessionRate and DefaultSessionBurst bound the owner sessions
	// one client may open: a burst of 1,000 (a node starting a large pool
	// of owners from one address), then 100 per second.
	DefaultSessionRate  = 100
	DefaultSessionBurst = 1000
	// maxLimited bounds the clients tracked; past it the table starts over
	// (every client gets a full burst again), which bounds its memory.
	maxLimited = 10_000
)

type bucket struct {
	tokens float64
	at     time.Time
}

// sessionLimiter is the token buckets of owner session opens.
type sessionLimiter struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     map[string]*bucket
}

func newSessionLimiter(rate, burst int) *sessionLimiter {
	return &sessionLimiter{rate: float64(rate), burst: float64(burst), buckets: map[string]*bucket{}}
}

// allow takes a token from client's bucket at now.
func (l *sessionLimiter) allow(client string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[client]
	if b == nil {
		if len(l.buckets) >= maxLimited {
			clear(l.buckets)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[client] = b
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(l.burst, b.tokens+dt*l.rate)
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// clientKey names a gRPC call's client for the limiter: its Fuge ID under
// TLS, else its IP address.
func (s *Server) clientKey(ctx context.Context) string {
	if id, on, err := s.peerIdentity(ctx); on && err == nil {
		return id.String()
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}
