package manager

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
)

// benchOwner is an owner core talking to the leader's loop directly, with a
// stream of its own in place of gRPC.
type benchOwner struct {
	core *ownerguard.Core
	st   *ownerStream
}

// dashboardPool starts a single-node server with one namespace of ring
// size r, and n owners that hold all of it.
func dashboardPool(b *testing.B, r, n int) (*Server, *leaderState, []*benchOwner) {
	b.Helper()
	cfg := testNodeConfig(b, "bench", "bench", r, time.Minute) // nothing expires during a run
	s, err := NewServer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Kill)
	waitLeading(b, s, time.Minute)
	s.mu.Lock()
	l := s.leader
	s.mu.Unlock()

	owners := make([]*benchOwner, n)
	next := map[int]*lease.LeaseRequest{} // each owner's latest request not yet sent
	for i := range owners {
		oc := ownerguard.DefaultCoreConfig()
		oc.Namespace, oc.Name, oc.Addr, oc.Incarnation = "bench", fmt.Sprintf("o%03d", i), fmt.Sprintf("o%03d:80", i), uint64(i+1)
		oc.LeaseDuration = cfg.LeaseDuration
		core, err := ownerguard.NewCore(oc)
		if err != nil {
			b.Fatal(err)
		}
		o := &benchOwner{core: core, st: &ownerStream{key: streamKey{"bench", oc.Name}, nonce: oc.Incarnation,
			out: make(chan *fugev1.LeaseResponse, 1024), cancel: func() {}}}
		if err := l.open(o.st); err != nil {
			b.Fatal(err)
		}
		owners[i] = o
		next[i] = core.Start(time.Now()).Send
	}
	// Deliver until every arc is granted: each owner's latest request,
	// then every response to whoever it is for. The owners answer at once
	// whatever changes what they hold.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		for _, i := range slices.Sorted(maps.Keys(next)) {
			req := next[i]
			delete(next, i)
			if err := l.request(*req); err != nil {
				b.Fatalf("request: %v", err)
			}
			for j, o := range owners {
				if req := o.drain(b); req != nil {
					next[j] = req
				}
			}
		}
		if len(next) > 0 {
			continue
		}
		if granted(b, l) {
			keepAlive(b, l, owners[1:], cfg.LeaseDuration/4)
			return s, l, owners
		}
		// Nothing to send and not all granted: the leader's timers owe an
		// owner a message (a race re-send). Wait for it.
		j, m, ok := awaitResponse(owners, deadline)
		if !ok {
			b.Fatal("the pool did not converge")
		}
		if req := owners[j].step(b, m); req != nil {
			next[j] = req
		}
		for j, o := range owners {
			if req := o.drain(b); req != nil {
				next[j] = req
			}
		}
	}
}

// keepAlive renews owners every interval, as their shells would, until
// cleanup, so that no session expires during a long run. owners[0] of the
// pool is left to the benchmark.
func keepAlive(b *testing.B, l *leaderState, owners []*benchOwner, every time.Duration) {
	done, stopped := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, o := range owners {
					o.drain(b)
					if req := o.core.Resend(time.Now()).Send; req != nil {
						_ = l.request(*req)
					}
				}
			}
		}
	}()
}

// drain steps the owner with every response queued for it and returns the
// last request it wants sent, or nil.
func (o *benchOwner) drain(b *testing.B) *lease.LeaseRequest {
	var req *lease.LeaseRequest
	for {
		select {
		case m := <-o.st.out:
			if r := o.step(b, m); r != nil {
				req = r
			}
		default:
			return req
		}
	}
}

// step steps the owner with one response and returns the request it wants
// sent, or nil.
func (o *benchOwner) step(b *testing.B, m *fugev1.LeaseResponse) *lease.LeaseRequest {
	resp, err := wire.ResponseFrom(m)
	if err != nil {
		b.Fatal(err)
	}
	return o.core.Step(resp, time.Now()).Send
}

// awaitResponse waits until a response is queued for one of owners and
// returns the owner's index and the response, or false at deadline.
func awaitResponse(owners []*benchOwner, deadline time.Time) (int, *fugev1.LeaseResponse, bool) {
	cases := make([]reflect.SelectCase, 0, len(owners)+1)
	for _, o := range owners {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(o.st.out)})
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
	i, v, _ := reflect.Select(cases)
	if i == len(owners) {
		return 0, nil, false
	}
	return i, v.Interface().(*fugev1.LeaseResponse), true
}

func granted(b *testing.B, l *leaderState) bool {
	ok := true
	if err := l.do(func() error {
		arcs, err := l.core.Leases("bench")
		for _, a := range arcs {
			ok = ok && a.State == Granted
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return ok
}

// pollAdmin reads the admin API's paths in turn, one request after
// another, as an operator's script polling the whole table would, until the
// function it returns is called. The reads' work done on the leader's loop
// is what renewals wait behind.
func pollAdmin(b *testing.B, s *Server, paths ...string) func() {
	_, _, h := s.Addrs()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h+paths[i%len(paths)], nil)
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			if r.StatusCode != http.StatusOK && ctx.Err() == nil {
				b.Errorf("GET %s: %s", paths[i%len(paths)], r.Status)
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// page emulates an open dashboard, far busier than a real one: an event
// stream read as it comes, the owners and the cluster polled every
// pollEvery (a page: every 5 s) and the whole snapshot loaded every
// reloadEvery (a page: once). It returns a function that stops it.
func page(b *testing.B, s *Server, pollEvery, reloadEvery time.Duration) func() {
	_, _, h := s.Addrs()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h+"/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	// The server subscribes the stream before it writes its hello: once
	// that is read, the page is live.
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && sc.Text() != "event: hello" {
	}
	if !s.events.live() {
		b.Fatal("the dashboard's event stream did not subscribe")
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer resp.Body.Close()
		for sc.Scan() {
		}
	}()
	go func() {
		defer wg.Done()
		get := func(path string) {
			r, err := http.DefaultClient.Get("http://" + h + path)
			if err == nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
		}
		poll, reload := time.NewTicker(pollEvery), time.NewTicker(reloadEvery)
		defer poll.Stop()
		defer reload.Stop()
		get("/ui/api/snapshot")
		for {
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
				get("/ui/api/owners")
				get("/v1/cluster")
			case <-reload.C:
				get("/ui/api/snapshot")
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// BenchmarkDashboard measures what an open dashboard costs the leader of a
// namespace of R = 65536 held by 50 owners:
//
//   - renew/idle: one owner's renewal through the leader's loop (the
//     request and the response queued for its stream), nobody watching;
//   - renew/page: the same while a page is open, 50 times busier than a
//     real one: its event stream subscribed, the owners and the cluster
//     polled every 100 ms, and the whole snapshot reloaded every second;
//   - renew/admin-reads: the same while a script reads the whole view,
//     ring and lease table (GET .../view, .../ring, .../leases) one after
//     another, without pause;
//   - snapshot: one page load (GET /ui/api/snapshot's work: the lease
//     table read on the loop, its JSON built off it);
//   - snapshot-on-loop: the part of it that holds the leader's loop;
//   - owners: one poll of the owners (/ui/api/owners).
//
// The renewals also report p50, p99 and the maximum: an open page must
// not move them.
func BenchmarkDashboard(b *testing.B) {
	const r, n = 65536, 50
	s, l, owners := dashboardPool(b, r, n)
	o := owners[0]
	renew := func(b *testing.B) {
		b.ReportAllocs()
		var lat []time.Duration
		for b.Loop() {
			b.StopTimer()
			req := o.core.Resend(time.Now()).Send
			b.StartTimer()
			start := time.Now()
			if err := l.request(*req); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			if o.drain(b) != nil {
				b.Fatal("a renewal changed what the owner holds")
			}
			b.StartTimer()
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
	}
	b.Run("renew/idle", renew)
	b.Run("renew/page", func(b *testing.B) {
		stop := page(b, s, 100*time.Millisecond, time.Second)
		defer stop()
		renew(b)
	})
	b.Run("renew/admin-reads", func(b *testing.B) {
		stop := pollAdmin(b, s, "/v1/namespaces/bench/view", "/v1/namespaces/bench/ring", "/v1/namespaces/bench/leases")
		defer stop()
		renew(b)
	})
	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.dashboard(true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("snapshot-on-loop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := l.do(func() error {
				_, err := l.core.Leases("bench")
				_, _ = l.core.Owners("bench")
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("owners", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.dashboard(false); err != nil {
				b.Fatal(err)
			}
		}
	})
	// One GET of each large list over HTTP, the client's reading included
	// (it discards what it reads).
	for _, list := range []string{"view", "ring", "leases"} {
		b.Run("admin-get/"+list, func(b *testing.B) {
			_, _, h := s.Addrs()
			var size int64
			b.ReportAllocs()
			for b.Loop() {
				r, err := http.Get("http://" + h + "/v1/namespaces/bench/" + list)
				if err != nil {
					b.Fatal(err)
				}
				size, err = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if err != nil || r.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %s, %v", list, r.Status, err)
				}
			}
			b.ReportMetric(float64(size), "body-bytes")
		})
	}
}
