package ownerguard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Migrator is the application's part of state migration on clean
// handoffs (a drain, Close, a rebalancing move): it writes a range's state
// out on the old owner and reads it in on the new one. The library moves
// the bytes, straight from the old owner to the new one over
// MigrationService (mutual TLS with the owners' certificates when
// MigrationConfig.TLS is set); the manager only says who and when.
//
// Export runs on the old owner once it has stopped serving r (its checks
// fail for every key of r), and before the ownership upcall reports r
// revoked, so the state is still there; gen is the generation r was held
// under: export the state stored under it. Import runs on the new owner
// before it serves r (its checks refuse r meanwhile); gen is the
// generation granted, under which to store what it reads. Import must
// read rd to io.EOF: an error from rd (the transfer failed, was cut off, or
// exceeded MigrationConfig.MaxBytes) means the import failed, and Import
// should return it. When an import fails or its deadline passes, the
// range is regranted under a newer generation with a loss notification,
// so state stored under gen is never trusted again, whatever Import left.
// Both run on their own goroutines, concurrently with request handlers
// and with each other, and must honour ctx.
type Migrator interface {
	Export(ctx context.Context, r ring.Range, gen lease.Gen, w io.Writer) error
	Import(ctx context.Context, r ring.Range, gen lease.Gen, rd io.Reader) error
}

// Defaults of MigrationConfig.
const (
	DefaultMigrationMaxBytes   = 256 << 20
	DefaultMigrationChunkBytes = 64 << 10
)

// Errors of migration.
var (
	ErrMigrationConfig = errors.New("ownerguard: migration needs a Migrator and a Listener")
	ErrMigrationSize   = errors.New("ownerguard: migrated state exceeds MaxBytes")
)

// MigrationConfig turns on state migration for an Owner
// (OwnerConfig.Migration).
type MigrationConfig struct {
	// Migrator exports and imports the application's state. Required.
	Migrator Migrator
	// Listener is where the Owner serves MigrationService for as long as
	// it runs. Required; the Owner closes it.
	Listener net.Listener
	// Addr is the address other owners dial to reach Listener; "" means
	// Listener.Addr().
	Addr string
	// TLS, when set, makes MigrationService mutual TLS with the owners'
	// certificates (fugetls.OwnerBase): an export is served only to the
	// owner the manager named, as its certificate proves, and an import is
	// read only from the owner the manager named. Nil means plaintext with
	// names taken on trust: for tests on 127.0.0.1 only.
	TLS *fugetls.Source
	// ImportTimeout bounds an import, from the grant: zero means
	// min(T/2, 2 s) (CoreConfig.ImportTimeout).
	ImportTimeout time.Duration
	// HandoverTimeout bounds how long Close waits for the manager to move
	// every range away with its state before it leaves plainly. Zero
	// means 2·ImportTimeout + T/4.
	HandoverTimeout time.Duration
	// MaxBytes bounds the state of one fetch, both ways. Zero means 256 MiB.
	MaxBytes int64
}

func (c MigrationConfig) withDefaults(t time.Duration) MigrationConfig {
	if c.ImportTimeout == 0 {
		c.ImportTimeout = min(t/2, DefaultImportTimeout)
	}
	if c.HandoverTimeout == 0 {
		c.HandoverTimeout = 2*c.ImportTimeout + t/4
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMigrationMaxBytes
	}
	if c.Addr == "" && c.Listener != nil {
		c.Addr = c.Listener.Addr().String()
	}
	return c
}

func (c MigrationConfig) validate() error {
	switch {
	case c.Migrator == nil || c.Listener == nil:
		return ErrMigrationConfig
	case c.ImportTimeout < 0 || c.HandoverTimeout < 0 || c.MaxBytes < 0:
		return fmt.Errorf("%w: negative timeout or size", ErrMigrationConfig)
	}
	return lease.ValidAddr("migration address", c.Addr)
}

// MigrationCounters counts an Owner's transfers.
type MigrationCounters struct {
	Exports, ExportsRefused, ExportBytes uint64
	Imports, ImportsFailed, ImportBytes  uint64
	OffersExpired                        uint64
}

// importResult is a finished fetch, for the session goroutine.
type importResult struct {
	im Import
	ok bool
}

// migShell is the Owner's migration shell: the MigrationService server, the
// offers it serves, and the fetches of imports.
type migShell struct {
	o   *Owner
	cfg MigrationConfig
	srv *grpc.Server
	// done carries finished imports to the session goroutine; it is read
	// by the session loop and by Close's handover.
	done   chan importResult
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	offers []Offer
	conns  map[string]*grpc.ClientConn

	exports, exportsRefused, exportBytes atomic.Uint64
	imports, importsFailed, importBytes  atomic.Uint64
	offersExpired                        atomic.Uint64
	active                               atomic.Int64  // exports in progress
	wake                                 chan struct{} // an export ended (Close's handover waits)
}

// exportEnded counts an export over and wakes a handover.
func (m *migShell) exportEnded() {
	m.active.Add(-1)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func newMigShell(o *Owner, cfg MigrationConfig) *migShell {
	m := &migShell{o: o, cfg: cfg, done: make(chan importResult), conns: map[string]*grpc.ClientConn{}, wake: make(chan struct{}, 1)}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(4 << 10), grpc.MaxConcurrentStreams(64)}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS.ServerConfig(false, fugetls.RoleOwner))))
	}
	m.srv = grpc.NewServer(opts...)
	fugev1.RegisterMigrationServiceServer(m.srv, migServer{m: m})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.srv.Serve(cfg.Listener)
	}()
	return m
}

// migrationStopGrace bounds how long stop lets the MigrationService finish
// the fetches it is serving before it cuts them.
const migrationStopGrace = time.Second

// stop ends the server, the fetches and their connections. The server stops
// gracefully: a handover waits until every export's handler has returned,
// and a handler that returned has not always written its stream's status
// yet; cut at once, the importer read EOF for an export that was whole and
// failed the import (TestMigrationCloseHandsOver, about 1 run in 15 on a
// loaded machine), and the range was regranted with a loss.
func (m *migShell) stop() {
	m.cancel()
	stopped := make(chan struct{})
	go func() {
		m.srv.GracefulStop()
		close(stopped)
	}()
	grace := time.NewTimer(migrationStopGrace)
	select {
	case <-stopped:
	case <-grace.C:
		m.srv.Stop()
		<-stopped
	}
	grace.Stop()
	m.mu.Lock()
	for _, c := range m.conns {
		c.Close()
	}
	m.conns = map[string]*grpc.ClientConn{}
	m.mu.Unlock()
	// Fetches still running hand their result to done; nobody reads it
	// any more, so drain it until they are all over.
	fin := make(chan struct{})
	go func() { m.wg.Wait(); close(fin) }()
	for {
		select {
		case <-m.done:
		case <-fin:
			return
		}
	}
}

func (m *migShell) counters() MigrationCounters {
	return MigrationCounters{
		Exports: m.exports.Load(), ExportsRefused: m.exportsRefused.Load(), ExportBytes: m.exportBytes.Load(),
		Imports: m.imports.Load(), ImportsFailed: m.importsFailed.Load(), ImportBytes: m.importBytes.Load(),
		OffersExpired: m.offersExpired.Load(),
	}
}

// offer registers offers; the session goroutine calls it before the
// request that releases them goes out.
func (m *migShell) offer(os []Offer) {
	if len(os) == 0 {
		return
	}
	m.mu.Lock()
	// A newer offer of a range supersedes an older one that was never
	// fetched: the range came back and was served under a newer
	// generation since, so the older state is stale. Its revocation is
	// the newer offer's.
	m.offers = slices.DeleteFunc(m.offers, func(old Offer) bool {
		return slices.ContainsFunc(os, func(of Offer) bool { _, ok := intersect(old.Range, of.Range); return ok })
	})
	m.offers = append(m.offers, os...)
	m.mu.Unlock()
}

// pending reports whether any offer is open.
func (m *migShell) pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.offers) > 0 || m.active.Load() > 0
}

// expire ends the offers due at now, reports their ranges revoked, and
// returns the next offer deadline (zero if none).
func (m *migShell) expire(now time.Time) time.Time {
	m.mu.Lock()
	var gone []ring.Range
	var next time.Time
	m.offers = slices.DeleteFunc(m.offers, func(of Offer) bool {
		if !now.Before(of.Deadline) {
			gone = append(gone, of.Range)
			return true
		}
		if next.IsZero() || of.Deadline.Before(next) {
			next = of.Deadline
		}
		return false
	})
	m.mu.Unlock()
	if len(gone) > 0 {
		m.offersExpired.Add(uint64(len(gone)))
		m.o.revokedLate(gone)
	}
	return next
}

// take removes and returns the offers to peer that cover r, cut to r, in
// ring order from r.Start, if together they cover all of r and none has
// expired at now, and counts an export in progress; otherwise it takes
// nothing.
func (m *migShell) take(peer string, r ring.Range, now time.Time) ([]Offer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var parts []Offer
	for _, of := range m.offers {
		if of.Peer != peer || !now.Before(of.Deadline) {
			continue
		}
		if x, ok := intersect(of.Range, r); ok {
			parts = append(parts, Offer{Range: x, Gen: of.Gen, Peer: of.Peer, Deadline: of.Deadline})
		}
	}
	off := func(x uint64) uint64 { return x - r.Start }
	slices.SortFunc(parts, func(a, b Offer) int {
		switch {
		case off(a.Range.Start) < off(b.Range.Start):
			return -1
		case off(a.Range.Start) > off(b.Range.Start):
			return 1
		}
		return 0
	})
	// Covered: the parts follow each other from r.Start to r.End.
	at := r.Start
	for i, p := range parts {
		if p.Range.Start != at || (i > 0 && at == r.Start) {
			return nil, false
		}
		at = p.Range.End
	}
	if len(parts) == 0 || at != r.End {
		return nil, false
	}
	m.offers = slices.DeleteFunc(m.offers, func(of Offer) bool {
		if of.Peer != peer {
			return false
		}
		_, ok := intersect(of.Range, r)
		return ok
	})
	m.active.Add(1) // under the lock: pending never sees it neither offered nor exporting
	return parts, true
}

// intersect returns a ∩ b when it is one range (ranges of the lease
// protocol are arcs of one owner, so an offer and a fetch of the same
// handoff meet in at most one piece); ok is false when they do not meet.
func intersect(a, b ring.Range) (ring.Range, bool) {
	if a.IsFull() {
		return b, true
	}
	if b.IsFull() {
		return a, true
	}
	// Offsets from b.Start: b is (0, lb].
	lb := b.End - b.Start
	s, e := a.Start-b.Start, a.End-b.Start
	switch {
	case s < e: // a does not wrap past b.Start
		lo, hi := s, min(e, lb)
		if lo >= hi {
			return ring.Range{}, false
		}
		return ring.Range{Start: b.Start + lo, End: b.Start + hi}, true
	default: // a contains b.Start: (s, 2^64) ∪ [0, e]
		if e == 0 {
			return ring.Range{}, false
		}
		return ring.Range{Start: b.Start, End: b.Start + min(e, lb)}, true
	}
}

// within reports whether r lies in outer.
func within(r, outer ring.Range) bool {
	x, ok := intersect(r, outer)
	return ok && x == r
}

// migServer is MigrationService.
type migServer struct {
	fugev1.UnimplementedMigrationServiceServer
	m *migShell
}

// Fetch streams the state of a range offered to the caller. Every field
// is checked before anything is exported, and a refused fetch takes no
// offer.
func (s migServer) Fetch(req *fugev1.MigrationFetch, st grpc.ServerStreamingServer[fugev1.MigrationChunk]) error {
	m := s.m
	cfg := m.o.cfg
	refuse := func(c codes.Code, format string, args ...any) error {
		m.exportsRefused.Add(1)
		return status.Errorf(c, "ownerguard: migration fetch refused: "+format, args...)
	}
	if req.Namespace != cfg.Namespace {
		return refuse(codes.InvalidArgument, "namespace %.64q is not %q", req.Namespace, cfg.Namespace)
	}
	if err := lease.ValidName("owner", req.Owner); err != nil {
		return refuse(codes.InvalidArgument, "%v", err)
	}
	r, err := wire.RangeFrom(req.Range)
	if err != nil {
		return refuse(codes.InvalidArgument, "range: %v", err)
	}
	if req.Gen == 0 {
		return refuse(codes.InvalidArgument, "gen must not be 0")
	}
	if m.cfg.TLS != nil {
		id, err := peerID(st.Context())
		if err != nil {
			return refuse(codes.Unauthenticated, "%v", err)
		}
		if want := fugetls.OwnerID(cfg.Namespace, req.Owner); id != want {
			return refuse(codes.PermissionDenied, "the caller is %v, not %v", id, want)
		}
	}
	now := m.o.clock.Now()
	parts, ok := m.take(req.Owner, r, now)
	if !ok {
		return refuse(codes.FailedPrecondition, "%v is not offered to %q", r, req.Owner)
	}
	// The offers are taken: whatever happens now, the state leaves here
	// once, and the ranges are reported revoked.
	defer func() {
		rs := make([]ring.Range, len(parts))
		for i, p := range parts {
			rs[i] = p.Range
		}
		m.o.revokedLate(rs)
	}()
	defer m.exportEnded() // take counted it
	deadline := parts[0].Deadline
	for _, p := range parts[1:] {
		if p.Deadline.Before(deadline) {
			deadline = p.Deadline
		}
	}
	ctx, cancel := context.WithDeadline(st.Context(), m.o.wallDeadline(deadline))
	defer cancel()
	w := &chunkWriter{st: st, max: m.cfg.MaxBytes, buf: make([]byte, 0, DefaultMigrationChunkBytes)}
	for _, p := range parts {
		if err := w.header(p.Range); err != nil {
			return err
		}
		if err := m.cfg.Migrator.Export(ctx, p.Range, p.Gen, w); err != nil {
			return status.Errorf(codes.Aborted, "ownerguard: export of %v failed: %v", p.Range, err)
		}
		if err := w.flush(); err != nil {
			return err
		}
	}
	m.exports.Add(1)
	m.exportBytes.Add(uint64(w.total))
	return nil
}

// wallDeadline converts a deadline on the Owner's clock to the wall clock
// that contexts use.
func (o *Owner) wallDeadline(d time.Time) time.Time {
	return time.Now().Add(d.Sub(o.clock.Now()))
}

func peerID(ctx context.Context) (fugetls.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return fugetls.ID{}, fmt.Errorf("%w: no peer", fugetls.ErrNoIdentity)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return fugetls.ID{}, fmt.Errorf("%w: not a TLS connection", fugetls.ErrNoIdentity)
	}
	return fugetls.PeerID(ti.State)
}

// chunkWriter is the io.Writer an Export writes to: chunks of up to
// DefaultMigrationChunkBytes, at most max bytes in all.
type chunkWriter struct {
	st    grpc.ServerStreamingServer[fugev1.MigrationChunk]
	max   int64
	total int64
	buf   []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if w.total+int64(len(p)) > w.max {
		return 0, fmt.Errorf("%w (%d bytes)", ErrMigrationSize, w.max)
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	w.total += int64(n)
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.st.Send(&fugev1.MigrationChunk{Data: w.buf})
	w.buf = w.buf[:0]
	return err
}

// header starts the state of one piece.
func (w *chunkWriter) header(r ring.Range) error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.st.Send(&fugev1.MigrationChunk{Range: wire.Range(r)})
}

// fetch imports im: it dials the previous owner, checks who answers, and
// feeds each piece of the stream to the Migrator. It reports the result
// to the session goroutine.
func (m *migShell) fetch(im Import) {
	defer m.wg.Done()
	ok := m.fetchOnce(im) == nil
	if ok {
		m.imports.Add(1)
	} else {
		m.importsFailed.Add(1)
	}
	select {
	case m.done <- importResult{im: im, ok: ok}:
	case <-m.ctx.Done():
	}
}

func (m *migShell) fetchOnce(im Import) error {
	ctx, cancel := context.WithDeadline(m.ctx, m.o.wallDeadline(im.Deadline))
	defer cancel()
	conn, err := m.conn(im.PeerAddr, im.Peer)
	if err != nil {
		return err
	}
	cfg := m.o.cfg
	st, err := fugev1.NewMigrationServiceClient(conn).Fetch(ctx, &fugev1.MigrationFetch{
		Namespace: cfg.Namespace, Owner: cfg.Name, Range: wire.Range(im.Range), Gen: uint64(im.Gen)},
		grpc.MaxCallRecvMsgSize(DefaultMigrationChunkBytes+1024))
	if err != nil {
		return err
	}
	rd := &chunkReader{st: st, max: m.cfg.MaxBytes}
	// Pieces follow each other from im.Range.Start; together they must be
	// all of im.Range, or nothing was imported.
	at, first := im.Range.Start, true
	for {
		r, err := rd.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if r.Start != at || (!first && at == im.Range.Start) || !within(r, im.Range) {
			return fmt.Errorf("ownerguard: migration piece %v out of order in %v", r, im.Range)
		}
		first = false
		if err := m.cfg.Migrator.Import(ctx, r, im.Gen, rd); err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, rd); err != nil { // the piece's tail, if Import left any
			return err
		}
		at = r.End
	}
	m.importBytes.Add(uint64(rd.total))
	if first || at != im.Range.End {
		return fmt.Errorf("ownerguard: migration of %v incomplete", im.Range)
	}
	return nil
}

// conn returns a connection to the MigrationService of peer at addr; with
// TLS, the handshake refuses anyone but peer.
func (m *migShell) conn(addr, peerName string) (*grpc.ClientConn, error) {
	key := addr + "|" + peerName
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.conns[key]; c != nil {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if m.cfg.TLS != nil {
		tc := m.cfg.TLS.ClientConfig(fugetls.RoleOwner)
		verify := tc.VerifyConnection
		want := fugetls.OwnerID(m.o.cfg.Namespace, peerName)
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if err := verify(cs); err != nil {
				return err
			}
			if id, err := fugetls.PeerID(cs); err != nil || id != want {
				return fmt.Errorf("ownerguard: migration peer at %s is %v, want %v", addr, id, want)
			}
			return nil
		}
		creds = credentials.NewTLS(tc)
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	m.conns[key] = c
	return c, nil
}

// chunkReader reads the pieces of a fetch: next moves to the next piece's
// header, and Read returns the piece's data, then io.EOF at its end. More
// than max bytes in all is an error.
type chunkReader struct {
	st      grpc.ServerStreamingClient[fugev1.MigrationChunk]
	max     int64
	total   int64
	data    []byte
	pending *fugev1.MigrationChunk // a header read past the end of a piece
	ended   error                  // the stream's end: io.EOF when complete
}

func (r *chunkReader) recv() (*fugev1.MigrationChunk, error) {
	if c := r.pending; c != nil {
		r.pending = nil
		return c, nil
	}
	if r.ended != nil {
		return nil, r.ended
	}
	c, err := r.st.Recv()
	if err != nil {
		r.ended = err
		return nil, err
	}
	if c.Range != nil && len(c.Data) > 0 {
		r.ended = fmt.Errorf("%w: a migration chunk carries both a range and data", wire.ErrMalformed)
		return nil, r.ended
	}
	r.total += int64(len(c.Data))
	if r.total > r.max {
		r.ended = fmt.Errorf("%w (%d bytes)", ErrMigrationSize, r.max)
		return nil, r.ended
	}
	return c, nil
}

// next skips what is left of the current piece and returns the next
// piece's range, or io.EOF after the last.
func (r *chunkReader) next() (ring.Range, error) {
	r.data = nil
	for {
		c, err := r.recv()
		if err != nil {
			return ring.Range{}, err
		}
		if c.Range != nil {
			return wire.RangeFrom(c.Range)
		}
	}
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.data) == 0 {
		c, err := r.recv()
		if err != nil {
			return 0, err
		}
		if c.Range != nil {
			r.pending = c
			return 0, io.EOF
		}
		r.data = c.Data
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}
