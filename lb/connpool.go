package lb

import (
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// DefaultStreamsPerConn is how many Lookup streams a ConnPool puts on one
// connection when NewConnPool is given 0. Every stream on a connection is
// sent its table at once when they connect together, one 16 KB frame each
// in turn: 100 Lookups starting together at ring size 65536 (3.7 MB
// tables) took 61 s and 15.5 s of CPU on one connection, 11 s and 3.6 s on
// ten (manager and Lookups in one process, on a busy 2-core machine).
const DefaultStreamsPerConn = 10

// Flow-control windows of a ConnPool's connections: a stream may receive
// 1 MiB, the connection 16 MiB, before the client acknowledges.
const (
	poolStreamWindow = 1 << 20
	poolConnWindow   = 16 << 20
)

// Errors of ConnPool.
var (
	// ErrPoolClosed is returned for a stream started on a closed ConnPool.
	ErrPoolClosed = errors.New("lb: connection pool closed")
	// ErrPoolOptions: a LookupConfig with Conns set also sets what the
	// pool's connections are dialled with.
	ErrPoolOptions = errors.New("lb: Conns is set: DialOptions, KeepaliveTime, KeepaliveTimeout and MaxMessageBytes are the pool's")
)

// ConnPool shares gRPC client connections among Lookups (LookupConfig.Conns):
// a process that runs many Lookups, such as a router following several
// namespaces or a load generator standing in for thousands of routers,
// multiplexes their streams onto a few TCP connections per manager instead
// of one connection each. Every Lookup keeps its own stream, its own
// subscriptions and its own table; only the connection (its reader, writer
// and keepalive goroutines, its buffers and its handshake) is shared. A
// connection is opened when a stream needs one and every open one to that
// address carries streamsPerConn streams, and closed when its last stream
// ends. Safe for concurrent use.
type ConnPool struct {
	opts    []grpc.DialOption
	perConn int

	mu     sync.Mutex
	closed bool
	conns  map[string][]*pooledConn
}

type pooledConn struct {
	cc      *grpc.ClientConn
	streams int
}

// NewConnPool returns a pool that puts up to streamsPerConn streams on one
// connection (0 means DefaultStreamsPerConn) and dials with insecure
// transport credentials, the default keepalive and receive limit of
// LookupConfig and flow-control windows of 1 MiB per stream and 16 MiB per
// connection, then opts, which override them.
func NewConnPool(streamsPerConn int, opts ...grpc.DialOption) (*ConnPool, error) {
	if streamsPerConn < 0 {
		return nil, errors.New("lb: ConnPool streamsPerConn must not be negative")
	}
	if streamsPerConn == 0 {
		streamsPerConn = DefaultStreamsPerConn
	}
	// The connection carries many tables at once (every Lookup on it
	// receives the whole table when it connects): windows sized for that
	// rather than grown by grpc-go's estimate, one round trip at a time.
	own := append(dialOptions(DefaultKeepaliveTime, DefaultKeepaliveTimeout, DefaultMaxMessageBytes),
		grpc.WithInitialWindowSize(poolStreamWindow), grpc.WithInitialConnWindowSize(poolConnWindow))
	return &ConnPool{
		opts:    append(own, opts...),
		perConn: streamsPerConn,
		conns:   map[string][]*pooledConn{},
	}, nil
}

// dialOptions are a Lookup's own dial options, before LookupConfig's.
func dialOptions(keepaliveTime, keepaliveTimeout time.Duration, maxMessageBytes int) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes)),
	}
}

// Conn returns a connection to addr with room for one more stream, and
// the function that gives the stream's place back, for a stream of the
// caller's own on the pool's connections (a load generator's stand-ins for
// Lookups, which keep less than a Lookup). Lookups get theirs the same way.
func (p *ConnPool) Conn(addr string) (*grpc.ClientConn, func(), error) { return p.get(addr) }

// get returns a connection to addr with room for one more stream, and the
// function that gives the stream's place back.
func (p *ConnPool) get(addr string) (*grpc.ClientConn, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrPoolClosed
	}
	var pc *pooledConn
	for _, c := range p.conns[addr] {
		if c.streams < p.perConn {
			pc = c
			break
		}
	}
	if pc == nil {
		cc, err := grpc.NewClient(addr, p.opts...)
		if err != nil {
			return nil, nil, err
		}
		pc = &pooledConn{cc: cc}
		p.conns[addr] = append(p.conns[addr], pc)
	}
	pc.streams++
	var once sync.Once
	return pc.cc, func() { once.Do(func() { p.release(addr, pc) }) }, nil
}

func (p *ConnPool) release(addr string, pc *pooledConn) {
	p.mu.Lock()
	pc.streams--
	if pc.streams > 0 || p.closed {
		p.mu.Unlock()
		return
	}
	cs := p.conns[addr]
	for i, c := range cs {
		if c == pc {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(p.conns, addr)
	} else {
		p.conns[addr] = cs
	}
	p.mu.Unlock()
	_ = pc.cc.Close()
}

// Conns reports how many connections are open, to every address.
func (p *ConnPool) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cs := range p.conns {
		n += len(cs)
	}
	return n
}

// Close closes every connection; streams on them end. Lookups using the
// pool then fail to connect until they are closed. Close is idempotent.
func (p *ConnPool) Close() error {
	p.mu.Lock()
	var all []*pooledConn
	if !p.closed {
		p.closed = true
		for _, cs := range p.conns {
			all = append(all, cs...)
		}
		p.conns = nil
	}
	p.mu.Unlock()
	for _, pc := range all {
		_ = pc.cc.Close()
	}
	return nil
}
