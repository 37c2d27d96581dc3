package ownerguard_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// mode is how a fake manager answers OwnerService.Lease.
type mode int

const (
	leader    mode = iota // run the lease core
	standby               // refuse with FAILED_PRECONDITION and a fuge-leader trailer
	blackhole             // read requests, never answer
)

// fakeManager is an in-process manager: a real gRPC server whose
// OwnerService.Lease feeds a manager.Manager lease core, serialized by a
// mutex, with a goroutine that runs the core's Tick at its NextDeadline.
// Like the real service, it refuses a second live stream for an owner name
// under another incarnation, and maps the core's errors to status codes.
type fakeManager struct {
	fugev1.UnimplementedOwnerServiceServer

	t    testing.TB
	addr string
	srv  *grpc.Server
	stop chan struct{}
	done chan struct{}
	wake chan struct{}

	mu      sync.Mutex
	core    *manager.Manager
	mode    mode
	leader  string                 // the trailer a standby sends
	streams map[string]*fakeStream // the live stream of each owner name
	opened  int                    // streams begun, in any mode
	eofs    int                    // streams the client half-closed
	// legacy: answer as a manager from before packed leases, whose
	// responses do not say it reads them; an owner that sends it packed
	// leases anyway fails the test (that manager would read no leases).
	legacy bool
	packed int // requests that carried held_packed
}

type fakeStream struct {
	owner string
	nonce uint64
	out   chan *fugev1.LeaseResponse
	kill  chan struct{}
}

// newFakeManager starts a fake manager on 127.0.0.1:0 with the given
// namespaces, all with lease duration T.
func newFakeManager(t testing.TB, T time.Duration, namespaces ...string) *fakeManager {
	t.Helper()
	cfg := manager.DefaultConfig()
	cfg.Nonce = uint64(time.Now().UnixNano()) | 1
	cfg.LeaseDuration = T
	cfg.RaceBackoffMin, cfg.RaceBackoffMax = T/600, T/60
	core, err := manager.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeManager{
		t: t, core: core, streams: map[string]*fakeStream{},
		stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	for _, ns := range namespaces {
		f.createNamespace(ns)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	f.srv = grpc.NewServer()
	fugev1.RegisterOwnerServiceServer(f.srv, f)
	go f.srv.Serve(lis)
	go f.loop()
	t.Cleanup(f.close)
	return f
}

func (f *fakeManager) close() {
	select {
	case <-f.stop:
		return
	default:
	}
	close(f.stop)
	f.srv.Stop()
	<-f.done
}

func (f *fakeManager) createNamespace(ns string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.core.CreateNamespace(manager.NamespaceConfig{Name: ns, RingSize: 64}, time.Now()); err != nil {
		f.t.Fatal(err)
	}
	f.kick()
}

func (f *fakeManager) setMode(m mode, leaderAddr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.leader = m, leaderAddr
}

// drop fails the live stream of owner with UNAVAILABLE.
func (f *fakeManager) drop(owner string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.streams[owner]
	if fs == nil {
		f.t.Fatalf("fake manager: no live stream for %q", owner)
	}
	delete(f.streams, owner)
	close(fs.kill)
}

func (f *fakeManager) setLegacy() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.legacy = true
}

func (f *fakeManager) packedRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.packed
}

func (f *fakeManager) counts() (opened, eofs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, f.eofs
}

// leases returns the manager's lease table of ns.
func (f *fakeManager) leases(ns string) []manager.ArcInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	arcs, err := f.core.Leases(ns)
	if err != nil {
		f.t.Fatal(err)
	}
	return arcs
}

func (f *fakeManager) kick() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// loop runs the core's timers.
func (f *fakeManager) loop() {
	defer close(f.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		f.mu.Lock()
		d := f.core.NextDeadline()
		f.mu.Unlock()
		wait := time.Hour
		if !d.IsZero() {
			wait = max(time.Until(d), 0)
		}
		timer.Reset(wait)
		select {
		case <-f.stop:
			return
		case <-f.wake:
			continue
		case <-timer.C:
		}
		f.mu.Lock()
		f.dispatchLocked(f.core.Tick(time.Now()))
		f.mu.Unlock()
	}
}

// dispatchLocked writes the core's messages to their owners' live streams;
// a message for an owner without one, or with a full queue, is lost.
func (f *fakeManager) dispatchLocked(out manager.Output) {
	for _, m := range out.Send {
		fs := f.streams[m.Owner]
		if fs == nil || fs.nonce != m.PeerNonce {
			continue
		}
		r := wire.Response(m, !f.legacy)
		r.Packed = !f.legacy
		select {
		case fs.out <- r:
		default:
		}
	}
}

// Lease serves one owner stream.
func (f *fakeManager) Lease(stream fugev1.OwnerService_LeaseServer) error {
	f.mu.Lock()
	f.opened++
	m, leaderAddr := f.mode, f.leader
	f.mu.Unlock()
	if m == standby {
		stream.SetTrailer(metadata.Pairs(ownerguard.LeaderTrailer, leaderAddr))
		return status.Error(codes.FailedPrecondition, "fake manager: not the leader")
	}
	fs := &fakeStream{out: make(chan *fugev1.LeaseResponse, 64), kill: make(chan struct{})}
	recvErr := make(chan error, 1)
	go func() { recvErr <- f.recv(stream, fs, m == blackhole) }()
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.streams[fs.owner] == fs {
			delete(f.streams, fs.owner)
		}
	}()
	for {
		select {
		case r := <-fs.out:
			if err := stream.Send(r); err != nil {
				return err
			}
		case err := <-recvErr:
			if err == io.EOF {
				f.mu.Lock()
				f.eofs++
				f.mu.Unlock()
				return nil
			}
			return err
		case <-fs.kill:
			return status.Error(codes.Unavailable, "fake manager: stream dropped")
		}
	}
}

// recv feeds the stream's requests to the core until the stream fails.
func (f *fakeManager) recv(stream fugev1.OwnerService_LeaseServer, fs *fakeStream, ignore bool) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		if ignore {
			continue
		}
		if len(msg.HeldPacked) > 0 {
			f.mu.Lock()
			f.packed++
			if f.legacy {
				f.t.Errorf("fake manager: owner %q sent packed leases to a manager that did not say it reads them", msg.Owner)
			}
			f.mu.Unlock()
		}
		req, err := wire.RequestFrom(msg)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := f.request(fs, req); err != nil {
			return err
		}
	}
}

func (f *fakeManager) request(fs *fakeStream, req lease.LeaseRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := fs.owner == ""
	if first {
		if old := f.streams[req.Owner]; old != nil && old.nonce != req.Nonce {
			return status.Errorf(codes.AlreadyExists, "fake manager: %q is held by another incarnation", req.Owner)
		}
	} else if req.Owner != fs.owner || req.Nonce != fs.nonce {
		return status.Error(codes.InvalidArgument, "fake manager: a stream carries one session")
	}
	out, err := f.core.Request(req, time.Now())
	switch {
	case errors.Is(err, manager.ErrUnknownNamespace):
		return status.Error(codes.NotFound, err.Error())
	case err != nil:
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if first {
		fs.owner, fs.nonce = req.Owner, req.Nonce
		if old := f.streams[req.Owner]; old != nil {
			close(old.kill) // the same incarnation reconnected
		}
		f.streams[req.Owner] = fs
	}
	f.dispatchLocked(out)
	f.kick()
	return nil
}

// table returns the manager's granted leases of owner as a table of
// generations (0 where it holds nothing), and whether the lease table is
// settled: every arc granted, to the owner the desired ring wants.
func (f *fakeManager) table(ns, owner string) (t *ring.Table[lease.Gen], settled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	arcs, err := f.core.Leases(ns)
	if err != nil {
		f.t.Fatal(err)
	}
	desired, err := f.core.DesiredRing(ns)
	if err != nil {
		f.t.Fatal(err)
	}
	t = ring.NewTable(lease.Gen(0))
	settled = true
	for _, a := range arcs {
		if a.State != manager.Granted || desired.LookupOwner(a.Range.End) != a.Owner {
			settled = false
		}
		if a.Owner == owner && a.State == manager.Granted {
			t.Set(a.Range, a.Gen)
		}
	}
	t.Compact()
	return t, settled
}

// heldTable is an Owner's held set as a table of generations.
func heldTable(ls []lease.Lease) *ring.Table[lease.Gen] {
	t := ring.NewTable(lease.Gen(0))
	for _, l := range ls {
		t.Set(l.Range, l.Gen)
	}
	t.Compact()
	return t
}

// rangeTable marks the points of rs.
func rangeTable(rs []ring.Range) *ring.Table[bool] {
	t := ring.NewTable(false)
	for _, r := range rs {
		t.Set(r, true)
	}
	t.Compact()
	return t
}
