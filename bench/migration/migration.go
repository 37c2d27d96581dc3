// Package migration measures what state migration saves: it drains one
// server of a presence pool under client load, with migration off and on,
// and counts the devices whose clients had to publish them again.
//
// Everything is real and on 127.0.0.1: a manager (raft, gRPC, xDS), Servers
// presence servers behind ownerguard, fuge-proxy, mutual TLS with
// certificates from a development CA. The clients publish Devices devices
// through the proxy; one Lookup (the clients' own, as in Centrifuge §4)
// hears the loss notifications and the clients republish every device in
// a lost range (presence.Client.OnLoss), which is what is counted. Load
// goroutines read devices through the proxy all along, and a read that
// finds no device (404) counts as a lost read: state a drain lost and not
// yet republished.
//
// Drain is the entry point; cmd/ prints its lines for make bench-migration,
// and the balance benchmark calls it for its "republished after drain"
// figure.
package migration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/proxy"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// Config is one drain. Zero values mean the defaults.
type Config struct {
	Servers  int           // presence servers; default 5
	Devices  int           // devices published; default 2000
	Readers  int           // load goroutines reading devices; default 4
	RingSize int           // the namespace's R; default 1024
	T        time.Duration // lease T; default 4 s
	// Migration turns state migration on (every server has a
	// MigrationService) or off (none has: every handoff is plain).
	Migration bool
	// Seed draws the devices read by the load.
	Seed uint64
	// Logf, if set, hears progress.
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	if c.Servers == 0 {
		c.Servers = 5
	}
	if c.Devices == 0 {
		c.Devices = 2000
	}
	if c.Readers == 0 {
		c.Readers = 4
	}
	if c.RingSize == 0 {
		c.RingSize = 1024
	}
	if c.T == 0 {
		c.T = 4 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Result is what one drain cost.
type Result struct {
	Migration bool
	Devices   int // published
	// OnDrained is how many devices the drained server held.
	OnDrained int
	// Republished is how many distinct devices the clients published again
	// because a lookup notified the loss of their range.
	Republished int
	// LossNotifications counts the lookup's loss upcalls after the drain.
	LossNotifications int
	// LostReads counts reads during and after the drain that found no
	// device (404): state lost and not yet republished. Reads is all of
	// them.
	LostReads, Reads int
	// Missing counts devices not found by a final read of every device.
	Missing int
	// Settle is how long the drain took: from the request until every arc
	// was another server's and the clients' republishing was over.
	Settle time.Duration
	// Transfers sums the servers' migration counters over the drain.
	Transfers ownerguard.MigrationCounters
}

// Line is the result as make bench-migration prints it.
func (r Result) Line() string {
	m := "off"
	if r.Migration {
		m = "on"
	}
	return fmt.Sprintf("drain migration=%s: republished %d of %d devices (%d on the drained server; %d lost reads of %d; %d missing after; settled in %v)",
		m, r.Republished, r.Devices, r.OnDrained, r.LostReads, r.Reads, r.Missing, r.Settle.Round(time.Millisecond))
}

const ns = "presence"

// Drain runs one drain and returns what it cost.
func Drain(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	p, err := startPool(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer p.close()
	return p.drain(ctx)
}

// pool is the running system.
type pool struct {
	cfg     Config
	dir     string
	mgr     *manager.Server
	admin   *http.Client
	httpURL string
	servers []*server
	prox    *proxy.Proxy
	look    *lb.Lookup
	client  *presence.Client
	ids     []string

	counting    atomic.Bool
	republished sync.Map // id -> true, once counting
	losses      atomic.Int64
	inflight    atomic.Int64 // OnLoss upcalls running
}

type server struct {
	name  string
	owner *ownerguard.Owner
	srv   *presence.Server
	hs    *http.Server
}

func (p *pool) source(id fugetls.ID) (*fugetls.Source, error) {
	base := string(id.Role) + "-" + id.Namespace + "-" + id.Name
	if err := fugetls.Issue(p.dir, base, id, nil, time.Now()); err != nil {
		return nil, err
	}
	return fugetls.NewSource(fugetls.DirFiles(p.dir, base))
}

func (p *pool) dial(id fugetls.ID) ([]grpc.DialOption, error) {
	src, err := p.source(id)
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(src.ClientConfig(fugetls.RoleManager)))}, nil
}

func startPool(ctx context.Context, cfg Config) (_ *pool, err error) {
	p := &pool{cfg: cfg}
	if p.dir, err = os.MkdirTemp("", "fuge-bench-migration-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if err := fugetls.InitDir(p.dir, fugetls.InitOptions{Now: time.Now()}); err != nil {
		return nil, err
	}
	msrc, err := fugetls.NewSource(fugetls.DirFiles(p.dir, fugetls.ManagerBase))
	if err != nil {
		return nil, err
	}
	mc := manager.DefaultServerConfig()
	mc.NodeID = "m1"
	mc.DataDir = p.dir + "/manager"
	mc.RaftAddr, mc.GRPCAddr, mc.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	mc.LeaseDuration = cfg.T
	mc.HeartbeatInterval = cfg.T / 8
	mc.Namespaces = []manager.NamespaceConfig{{Name: ns, RingSize: cfg.RingSize}}
	mc.RaftHeartbeatTimeout, mc.RaftElectionTimeout, mc.RaftLeaderLeaseTimeout = 200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	mc.TLS = msrc
	mc.Logger = slog.New(slog.DiscardHandler)
	var srv *manager.Server
	lt := xds.NewLeaseTable(xds.LeaseTableConfig{Gate: func(ctx context.Context) error { return srv.CheckLeader(ctx) }})
	mc.Observer, mc.Heartbeat = lt, lt.Heartbeat
	if srv, err = manager.NewServer(mc); err != nil {
		return nil, err
	}
	if err := srv.Start(lt.Register); err != nil {
		return nil, err
	}
	p.mgr = srv
	_, grpcAddr, httpAddr := srv.Addrs()
	p.httpURL = "https://" + httpAddr
	asrc, err := p.source(fugetls.AdminID("bench"))
	if err != nil {
		return nil, err
	}
	p.admin = &http.Client{Transport: &http.Transport{TLSClientConfig: asrc.ClientConfig(fugetls.RoleManager)}, Timeout: 10 * time.Second}
	if err := waitFor(ctx, "the manager to lead", srv.IsLeader); err != nil {
		return nil, err
	}

	for i := range cfg.Servers {
		s, err := p.startServer(ctx, fmt.Sprintf("p%d", i+1), grpcAddr)
		if err != nil {
			return nil, err
		}
		p.servers = append(p.servers, s)
	}

	psrc, err := p.source(fugetls.ProxyID("bench"))
	if err != nil {
		return nil, err
	}
	pc := proxy.DefaultConfig()
	pc.ListenAddr, pc.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	pc.Managers, pc.Namespace = []string{grpcAddr}, ns
	pc.ManagerTLS = psrc.ClientConfig(fugetls.RoleManager)
	pc.LookupStalenessBound = cfg.T
	pc.Logger = slog.New(slog.DiscardHandler)
	if p.prox, err = proxy.New(pc); err != nil {
		return nil, err
	}
	if err := p.prox.Start(); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "the proxy to be ready", p.prox.Healthy); err != nil {
		return nil, err
	}

	p.client, err = presence.NewClient(presence.ClientConfig{
		BaseURL:     "http://" + p.prox.Addr().String(),
		Attempts:    8,
		Concurrency: 16,
		OnRepublish: func(id string, _ presence.Answer, _ error) {
			if p.counting.Load() {
				p.republished.Store(id, true)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	ldial, err := p.dial(fugetls.ProxyID("clients"))
	if err != nil {
		return nil, err
	}
	p.look, err = lb.NewLookup(lb.LookupConfig{
		Managers: []string{grpcAddr}, Namespace: ns, Name: "clients", StalenessBound: cfg.T, DialOptions: ldial,
		OnLoss: func(rs []ring.Range, all bool) {
			if p.counting.Load() {
				p.losses.Add(1)
			}
			p.inflight.Add(1)
			defer p.inflight.Add(-1)
			p.client.OnLoss(rs, all)
		},
	})
	if err != nil {
		return nil, err
	}
	if err := p.look.Start(ctx); err != nil {
		return nil, err
	}
	if err := p.settled(ctx, ""); err != nil {
		return nil, err
	}
	for i := range cfg.Devices {
		id := fmt.Sprintf("dev-%d", i)
		p.ids = append(p.ids, id)
		if _, err := p.client.Publish(ctx, id, fmt.Sprintf("192.0.2.%d:%d", i%250, 1000+i%50000)); err != nil {
			return nil, fmt.Errorf("publish %s: %w", id, err)
		}
	}
	cfg.Logf("pool up: %d servers, %d devices, migration %v", cfg.Servers, cfg.Devices, cfg.Migration)
	return p, nil
}

func (p *pool) startServer(ctx context.Context, name, grpcAddr string) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	id := fugetls.OwnerID(ns, name)
	src, err := p.source(id)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &server{name: name}
	var mig *ownerguard.MigrationConfig
	if p.cfg.Migration {
		mln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ln.Close()
			return nil, err
		}
		mig = &ownerguard.MigrationConfig{Migrator: migrator{s}, Listener: mln, TLS: src}
	}
	s.owner, err = ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: []string{grpcAddr}, Namespace: ns, Name: name, Addr: ln.Addr().String(),
		LeaseDuration: p.cfg.T, Migration: mig,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(src.ClientConfig(fugetls.RoleManager)))},
		OnOwnership: func(_, revoked []ring.Range) { s.srv.Drop(revoked) },
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.srv = presence.NewServer(s.owner)
	guard, err := ownerguard.NewGuard(s.owner, ownerguard.GuardConfig{Name: name})
	if err != nil {
		ln.Close()
		return nil, err
	}
	if err := s.owner.Start(context.WithoutCancel(ctx)); err != nil {
		ln.Close()
		return nil, err
	}
	s.hs = &http.Server{Handler: guard.HTTP(s.srv), ReadHeaderTimeout: 10 * time.Second}
	go s.hs.Serve(ln)
	select {
	case <-s.owner.Ready():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s, nil
}

// migrator hands the Owner's upcalls to its presence server, made after it.
type migrator struct{ s *server }

func (m migrator) Export(ctx context.Context, r ring.Range, g lease.Gen, w io.Writer) error {
	return m.s.srv.Export(ctx, r, g, w)
}

func (m migrator) Import(ctx context.Context, r ring.Range, g lease.Gen, rd io.Reader) error {
	return m.s.srv.Import(ctx, r, g, rd)
}

func (p *pool) close() {
	if p.look != nil {
		p.look.Close()
	}
	if p.prox != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.prox.Shutdown(ctx)
		cancel()
	}
	for _, s := range p.servers {
		s.owner.Abandon() // the pool ends: no handover
		s.hs.Close()
	}
	if p.mgr != nil {
		p.mgr.Kill()
	}
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

// settled waits until every arc is granted to a server other than except,
// the clients' lookup shows that table, every server serves every key its
// lookup entry names (no import in progress), and no republish runs.
func (p *pool) settled(ctx context.Context, except string) error {
	return waitFor(ctx, "the pool to settle", func() bool {
		es := p.look.Entries()
		if len(es) == 0 {
			return false
		}
		byName := map[string]*server{}
		for _, s := range p.servers {
			byName[s.name] = s
		}
		for _, e := range es {
			s := byName[e.Owner]
			if e.Owner == "" || e.Owner == except || s == nil {
				return false
			}
			if h, ok := s.owner.GetOwnershipHandle(e.Range.End); !ok || h.Gen != e.Gen {
				return false
			}
		}
		return p.inflight.Load() == 0
	})
}

func (p *pool) drain(ctx context.Context) (Result, error) {
	cfg := p.cfg
	victim := p.servers[0]
	res := Result{Migration: cfg.Migration, Devices: len(p.ids)}
	for _, id := range p.ids {
		if _, _, _, ok := p.look.LookupKey(id); ok && p.look.Entries() != nil {
			if h, ok := victim.owner.GetOwnershipHandleKey(id); ok && h.Gen != 0 {
				res.OnDrained++
			}
		}
	}
	// Load: readers GET random devices until the drain has settled.
	stop := make(chan struct{})
	var reads, lost atomic.Int64
	var wg sync.WaitGroup
	for i := range cfg.Readers {
		rnd := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := p.client.Get(ctx, p.ids[rnd.IntN(len(p.ids))])
				reads.Add(1)
				if errors.Is(err, presence.ErrNotFound) {
					lost.Add(1)
				}
			}
		})
	}
	before := p.transfers()
	p.counting.Store(true)
	start := time.Now()
	resp, err := p.admin.Post(p.httpURL+"/v1/namespaces/"+ns+"/owners/"+victim.name+"/drain", "", nil)
	if err != nil {
		close(stop)
		wg.Wait()
		return res, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		close(stop)
		wg.Wait()
		return res, fmt.Errorf("drain: %s", resp.Status)
	}
	err = p.settled(ctx, victim.name)
	// The lookup delivers a loss upcall after it publishes the table that
	// settled saw, from a goroutine of its own: closing it delivers every
	// upcall still queued (the clients republish in it), so that none is
	// counted too late or raced by the final reads.
	p.look.Close()
	res.Settle = time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		return res, err
	}
	res.Reads, res.LostReads = int(reads.Load()), int(lost.Load())
	after := p.transfers()
	res.Transfers = ownerguard.MigrationCounters{
		Exports: after.Exports - before.Exports, ExportsRefused: after.ExportsRefused - before.ExportsRefused,
		ExportBytes: after.ExportBytes - before.ExportBytes, Imports: after.Imports - before.Imports,
		ImportsFailed: after.ImportsFailed - before.ImportsFailed, ImportBytes: after.ImportBytes - before.ImportBytes,
		OffersExpired: after.OffersExpired - before.OffersExpired,
	}
	res.LossNotifications = int(p.losses.Load())
	p.republished.Range(func(_, _ any) bool { res.Republished++; return true })
	for _, id := range p.ids {
		if _, err := p.client.Get(ctx, id); errors.Is(err, presence.ErrNotFound) {
			res.Missing++
		}
	}
	cfg.Logf("%s; transfers %+v", res.Line(), res.Transfers)
	return res, nil
}

// transfers sums the servers' migration counters.
func (p *pool) transfers() ownerguard.MigrationCounters {
	var t ownerguard.MigrationCounters
	for _, s := range p.servers {
		c := s.owner.Stats().Migration
		t.Exports += c.Exports
		t.ExportsRefused += c.ExportsRefused
		t.ExportBytes += c.ExportBytes
		t.Imports += c.Imports
		t.ImportsFailed += c.ImportsFailed
		t.ImportBytes += c.ImportBytes
		t.OffersExpired += c.OffersExpired
	}
	return t
}

// waitFor polls cond every 5 ms until it holds, ctx ends, or a minute
// passes.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("migration: timed out waiting for %s", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond): // polling interval, not a guess
		}
	}
	return nil
}
