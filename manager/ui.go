package manager

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The dashboard: a page at /ui/ (plain HTML, JavaScript and CSS embedded
// in the binary, nothing loaded from elsewhere) that draws each
// namespace's ring, lists its lease table, owners and the raft cluster,
// and follows the event log live (GET /v1/events, server-sent events).
//
// What an open page costs the leader: one snapshot of the lease table when
// it loads or reconnects (O(arcs) on the leader's loop), the owner list
// every few seconds (O(owners)), and nothing per renewal: the table is kept
// up to date from the event stream, whose deltas are made only while a page
// listens and are encoded once, off the leader's loop. BenchmarkDashboard
// measures it at R = 65536 with 50 owners (2 shared cores): a renewal costs
// the loop 107 µs with or without a page open (p50 93 and 80 µs, p99 532
// and 614 µs); a page load holds the loop for 2.5 ms and takes 25 ms in
// all (its JSON, about 8 MB, is built off the loop); an owners poll, 30 µs.
//
// The routes sit behind the admin guard like the rest of the API: with
// TLS, reading needs a client certificate from the cluster's CA and the
// forms (drain, create a namespace) need an admin's.

//go:embed ui
var uiFiles embed.FS

// registerUI adds the dashboard's routes to the admin mux.
func (s *Server) registerUI(mux *http.ServeMux) {
	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic("manager: embedded dashboard: " + err.Error())
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(static))
	mux.Handle("GET /ui/", uiHeaders(files))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	mux.HandleFunc("GET /ui/api/snapshot", s.getSnapshot)
	mux.HandleFunc("GET /ui/api/owners", s.getDashOwners)
	mux.HandleFunc("GET /v1/events", s.getEvents)
}

// uiHeaders keeps the page to its own files and out of other sites'
// frames: it can drain owners for an admin.
func uiHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// dashOwner is an owner as the dashboard lists it. LastHeard is empty on a
// standby (only the leader hears owners); Load is null until owners report
// load.
type dashOwner struct {
	Name      string   `json:"name"`
	Addr      string   `json:"addr"`
	VNodes    int      `json:"vnodes"`
	Draining  bool     `json:"draining"`
	Waiting   bool     `json:"waiting"`
	LastHeard string   `json:"last_heard,omitempty"`
	Load      *float64 `json:"load"`
}

type dashNamespace struct {
	Name          string      `json:"name"`
	RingSize      int         `json:"ring_size"`
	Header        string      `json:"header"`
	LeaseDuration string      `json:"lease_duration"`
	LSN           uint64      `json:"lsn"`
	Arcs          []ArcJSON   `json:"arcs,omitempty"`
	Owners        []dashOwner `json:"owners"`
}

// snapshotJSON is what a page loads: every namespace's lease table and
// owners, and the last event sequence number they include (Seq): a page
// applies the deltas numbered after it.
type snapshotJSON struct {
	Node       string          `json:"node"`
	Role       string          `json:"role"`
	Source     string          `json:"source"` // "leader": the lease core's table; "replica": the replicated view (no recall states)
	Epoch      string          `json:"epoch"`
	Seq        uint64          `json:"seq"`
	Namespaces []dashNamespace `json:"namespaces"`
}

// getSnapshot serves the page's snapshot: from the lease core on the
// leader, from the replicated state elsewhere.
func (s *Server) getSnapshot(w http.ResponseWriter, _ *http.Request) {
	s.writeDash(w, true)
}

// getDashOwners serves the owners alone: what a page polls.
func (s *Server) getDashOwners(w http.ResponseWriter, _ *http.Request) {
	s.writeDash(w, false)
}

func (s *Server) writeDash(w http.ResponseWriter, arcs bool) {
	// The sequence number first: an event published while the table is
	// read is then sent again, and applying a delta twice is harmless;
	// one left out would be lost.
	out := snapshotJSON{Node: s.cfg.NodeID, Role: roleName(s.raft.State()), Epoch: s.events.epoch, Seq: s.events.lastSeq(),
		Namespaces: []dashNamespace{}}
	s.mu.Lock()
	l := s.leader
	s.mu.Unlock()
	var err error
	if l != nil {
		out.Source = "leader"
		out.Namespaces, err = l.dashboard(arcs)
	} else {
		out.Source = "replica"
		out.Namespaces, err = s.fsm.dashboard(arcs)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// dashboard reads the namespaces from the lease core, on its loop; the
// JSON is built after, off the loop.
func (l *leaderState) dashboard(withArcs bool) ([]dashNamespace, error) {
	type nsData struct {
		cfg    NamespaceConfig
		lsn    uint64
		arcs   []ArcInfo
		owners []OwnerInfo
	}
	var data []nsData
	err := l.do(func() error {
		for _, nc := range l.core.Namespaces() {
			d := nsData{cfg: nc}
			d.lsn, _ = l.core.LSN(nc.Name)
			d.owners, _ = l.core.Owners(nc.Name)
			if withArcs {
				d.arcs, _ = l.core.Leases(nc.Name)
			}
			data = append(data, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]dashNamespace, 0, len(data))
	for _, d := range data {
		dn := dashNamespace{Name: d.cfg.Name, RingSize: d.cfg.RingSize, Header: d.cfg.Header,
			LeaseDuration: d.cfg.LeaseDuration.String(), LSN: d.lsn, Owners: []dashOwner{}}
		for _, a := range d.arcs {
			dn.Arcs = append(dn.Arcs, ArcJSON{Start: hex16(a.Range.Start), End: hex16(a.Range.End), Owner: a.Owner,
				Generation: uint64(a.Gen), State: a.State.String()})
		}
		for _, o := range d.owners {
			dn.Owners = append(dn.Owners, dashOwner{Name: o.Name, Addr: o.Addr, VNodes: o.VNodes, Draining: o.Draining,
				Waiting: o.Waiting, LastHeard: o.LastHeard.UTC().Format(time.RFC3339Nano)})
		}
		out = append(out, dn)
	}
	return out, nil
}

// dashboard reads the namespaces from the replicated state: the lookups'
// view, in which an arc is granted or free (a standby does not know which
// are being recalled).
func (f *fsm) dashboard(withArcs bool) ([]dashNamespace, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]dashNamespace, 0, len(f.st.Namespaces))
	for _, name := range sortedKeys(f.st.Namespaces) {
		st := f.st.Namespaces[name]
		dn := dashNamespace{Name: name, RingSize: st.Config.RingSize, Header: st.Config.Header,
			LeaseDuration: st.Config.LeaseDuration.String(), LSN: st.LSN, Owners: []dashOwner{}}
		if withArcs {
			for _, e := range st.Entries.Entries() {
				state := Granted
				if e.Owner == "" {
					state = Free
				}
				dn.Arcs = append(dn.Arcs, ArcJSON{Start: hex16(e.Range.Start), End: hex16(e.Range.End), Owner: e.Owner,
					Generation: uint64(e.Gen), State: state.String()})
			}
		}
		vn := map[string]int{}
		if v, err := st.RingView(); err == nil {
			for _, o := range v.Owners {
				vn[o.Name] = o.VNodes
			}
		}
		for _, o := range st.Owners {
			dn.Owners = append(dn.Owners, dashOwner{Name: o.Name, Addr: o.Addr, VNodes: vn[o.Name], Draining: o.Draining, Waiting: o.Waiting})
		}
		out = append(out, dn)
	}
	return out, nil
}

// eventsPing is how often an idle event stream sends a comment, so that
// proxies keep it open and a dead client is noticed.
const eventsPing = 15 * time.Second

// eventsWriteTimeout bounds one write to an event stream: a client that
// stops reading is dropped by the hub, and its handler ends here.
const eventsWriteTimeout = 10 * time.Second

// getEvents streams the event log as server-sent events: first the kept
// events after the client's Last-Event-ID (all of them for a new client),
// then each as it happens. "log" events are Event values; "delta" events
// update an open page's table (see delta). A client that falls behind by
// more than subscriberBuffer items is cut off; its browser reconnects and
// the page reloads its snapshot.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	since := uint64(0)
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if ep, seq, ok := strings.Cut(id, ":"); ok && ep == s.events.epoch {
			since, _ = strconv.ParseUint(seq, 10, 64)
		}
	}
	sub, past, ok := s.events.subscribe(since)
	if !ok {
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: fmt.Sprintf("manager: this node serves %d event streams already", s.events.maxSubs)})
		return
	}
	defer s.events.unsubscribe(sub)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	hello := fmt.Appendf(nil, "retry: 2000\nevent: hello\ndata: {\"node\":%q,\"epoch\":%q}\n\n", s.cfg.NodeID, s.events.epoch)
	for _, it := range past {
		hello = append(hello, it.frame(s.events.epoch)...)
	}
	if !write(hello) {
		return
	}
	ping := time.NewTicker(eventsPing)
	defer ping.Stop()
	for {
		select {
		case it, ok := <-sub.ch:
			if !ok {
				write([]byte("event: dropped\ndata: {}\n\n"))
				return
			}
			if !write(it.frame(s.events.epoch)) {
				return
			}
		case <-ping.C:
			if !write([]byte(": ping\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
	}
}

// sseFrame is one server-sent event. data is one line of JSON.
func sseFrame(event, epoch string, seq uint64, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(event)+len(epoch)+40)
	b = fmt.Appendf(b, "event: %s\nid: %s:%d\ndata: ", event, epoch, seq)
	b = append(b, data...)
	return append(b, "\n\n"...)
}
