package manager

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// maxAdminBody bounds an admin request body.
const maxAdminBody = 1 << 20

// Handler is the admin API (JSON), /metrics, /healthz and /readyz.
// Requests that need the lease core are redirected (307) from a standby to
// the leader; /v1/cluster answers on every node.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metrics.handler())
	// Profiles for operators, only when asked for (ServerConfig.Pprof), and
	// then only for admins.
	if s.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	}
	mux.HandleFunc("GET /v1/cluster", s.getCluster)
	mux.HandleFunc("POST /v1/cluster/join", s.leaderOnly(s.postJoin))
	mux.HandleFunc("GET /v1/namespaces", s.leaderOnly(s.getNamespaces))
	mux.HandleFunc("POST /v1/namespaces", s.leaderOnly(s.postNamespace))
	mux.HandleFunc("DELETE /v1/namespaces/{ns}", s.leaderOnly(s.deleteNamespace))
	mux.HandleFunc("PUT /v1/namespaces/{ns}/balance", s.leaderOnly(s.putBalance))
	mux.HandleFunc("GET /v1/namespaces/{ns}/ring", s.leaderOnly(s.getRing))
	mux.HandleFunc("GET /v1/namespaces/{ns}/leases", s.leaderOnly(s.getLeases))
	mux.HandleFunc("GET /v1/namespaces/{ns}/owners", s.leaderOnly(s.getOwners))
	mux.HandleFunc("GET /v1/namespaces/{ns}/view", s.leaderOnly(s.getView))
	mux.HandleFunc("POST /v1/namespaces/{ns}/owners/{name}/drain", s.leaderOnly(s.postDrain))
	mux.HandleFunc("GET /v1/namespaces/{ns}/ratelimits", s.leaderOnly(s.getRateLimits)) // proxysvc_limits.go
	mux.HandleFunc("PUT /v1/namespaces/{ns}/ratelimits", s.leaderOnly(s.putRateLimits))
	mux.HandleFunc("GET /v1/namespaces/{ns}/proxies", s.leaderOnly(s.getProxies))
	s.registerUI(mux) // the dashboard (/ui/) and the event stream (/v1/events): ui.go
	return s.guard(mux)
}

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeJSONList writes the JSON object head (a struct) with one more
// member, key, the list of item(0) ... item(n-1), streamed: each item is
// encoded and written in turn, one to a line, so that a list of R = 65536
// entries costs the server a write buffer rather than the whole document.
// Built whole and indented (writeJSON), one GET of the view at R = 65536
// allocated about 50 MB on the leader, and a client polling it raised the
// leader's RSS by 200 MB.
func writeJSONList[T any](w http.ResponseWriter, head any, key string, n int, item func(i int) T) {
	h, err := json.Marshal(head)
	if err != nil || len(h) < 2 || h[len(h)-1] != '}' {
		writeErr(w, fmt.Errorf("admin: encoding %T: %v", head, err))
		return
	}
	k, _ := json.Marshal(key)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.Write(h[:len(h)-1])
	if len(h) > 2 { // head has members
		bw.WriteByte(',')
	}
	bw.Write(k)
	bw.WriteString(":[\n")
	enc := json.NewEncoder(bw) // each item ends with a newline
	for i := range n {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := enc.Encode(item(i)); err != nil {
			return // the status is sent: the client sees a truncated document
		}
	}
	bw.WriteString("]}\n")
	bw.Flush()
}

func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrConfig):
		code = http.StatusBadRequest
	case errors.Is(err, ErrUnknownNamespace), errors.Is(err, ErrUnknownOwner):
		code = http.StatusNotFound
	case errors.Is(err, ErrNamespaceExists), errors.Is(err, ErrJoinRefused):
		code = http.StatusConflict
	case errors.Is(err, ErrNotLeader):
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, apiError{Error: err.Error()})
}

// tokenOK reports whether r carries the admin token
// (ServerConfig.AdminToken) as "Authorization: Bearer <token>".
func (s *Server) tokenOK(r *http.Request) bool {
	tok := s.cfg.AdminToken
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok != "" && ok && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1
}

// leaderOnly runs h with the leader's core, redirects from a standby, and
// answers 503 while there is no leader.
func (s *Server) leaderOnly(h func(http.ResponseWriter, *http.Request, *leaderState)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		l := s.leader
		s.mu.Unlock()
		if l == nil {
			if _, _, addr := s.Leader(); addr != "" {
				u := *r.URL
				u.Scheme, u.Host = s.httpScheme(), addr
				http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
				return
			}
			writeErr(w, fmt.Errorf("%w: no leader is known", ErrNotLeader))
			return
		}
		h(w, r, l)
	}
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", ErrBadRequest, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: body: trailing data after the JSON value", ErrBadRequest)
	}
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if id, _, _ := s.Leader(); id == "" {
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: "no leader"})
		return
	}
	io.WriteString(w, "ready\n")
}

type clusterJSON struct {
	NodeID      string       `json:"node_id"`
	RaftAddr    string       `json:"raft_addr"` // this node's, as advertised
	Role        string       `json:"role"`
	LeaderID    string       `json:"leader_id"`
	LeaderGRPC  string       `json:"leader_grpc"`
	LeaderHTTP  string       `json:"leader_http"`
	Term        uint64       `json:"term"`
	LastIndex   uint64       `json:"last_index"`
	CommitIndex uint64       `json:"commit_index"`
	Servers     []serverJSON `json:"servers"`
	// LookupStreams is this node's open xDS streams (Lookups among them);
	// StandbysInContact, on the leader, the standbys its raft heartbeats
	// reach, to which it sends Lookups (CheckLookup).
	LookupStreams     int      `json:"lookup_streams"`
	StandbysInContact []string `json:"standbys_in_contact"`
}

type serverJSON struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
}

func (s *Server) getCluster(w http.ResponseWriter, _ *http.Request) {
	id, g, h := s.Leader()
	advRaft, _, _ := s.advertised()
	c := clusterJSON{
		NodeID: s.cfg.NodeID, RaftAddr: advRaft, Role: roleName(s.raft.State()),
		LeaderID: id, LeaderGRPC: g, LeaderHTTP: h,
		Term: s.raft.CurrentTerm(), LastIndex: s.raft.LastIndex(), CommitIndex: s.raft.AppliedIndex(),
		Servers: []serverJSON{}, StandbysInContact: s.StandbysInContact(),
	}
	if c.StandbysInContact == nil {
		c.StandbysInContact = []string{}
	}
	if s.cfg.LookupStreams != nil {
		c.LookupStreams = s.cfg.LookupStreams()
	}
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, sv := range f.Configuration().Servers {
			c.Servers = append(c.Servers, serverJSON{ID: string(sv.ID), Address: string(sv.Address), Suffrage: sv.Suffrage.String()})
		}
	}
	writeJSON(w, http.StatusOK, c)
}

func roleName(st raft.RaftState) string {
	switch st {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	case raft.Follower:
		return "follower"
	}
	return "shutdown"
}

type joinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	GRPCAddr string `json:"grpc_addr"`
	HTTPAddr string `json:"http_addr"`
}

func (s *Server) postJoin(w http.ResponseWriter, r *http.Request, _ *leaderState) {
	var j joinRequest
	if err := decodeBody(r, &j); err != nil {
		writeErr(w, err)
		return
	}
	if err := s.checkJoin(r.Context(), j); err != nil {
		writeErr(w, err)
		return
	}
	if err := s.raft.AddVoter(raft.ServerID(j.ID), raft.ServerAddress(j.RaftAddr), 0, 10*time.Second).Error(); err != nil {
		writeErr(w, err)
		return
	}
	if err := s.apply(command{Op: "node", Node: &NodeInfo{ID: j.ID, GRPCAddr: j.GRPCAddr, HTTPAddr: j.HTTPAddr}}); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// ErrJoinRefused is a join the leader will not apply.
var ErrJoinRefused = errors.New("manager: join refused")

// checkJoin validates a join before raft sees it. A member rejoining under
// its own id and raft address is accepted (a restart); a join that would
// change a member's address, reuse another member's raft address, or name
// a node that does not answer for that id and raft address at its own admin
// address is refused. A made-up voter would cost the cluster its quorum.
func (s *Server) checkJoin(ctx context.Context, j joinRequest) error {
	if s.cfg.UnsafeNoInputChecks {
		if j.ID == "" || j.RaftAddr == "" {
			return fmt.Errorf("%w: id and raft_addr are required", ErrBadRequest)
		}
		return nil
	}
	if err := lease.ValidName("id", j.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	for _, a := range []struct{ what, v string }{{"raft_addr", j.RaftAddr}, {"grpc_addr", j.GRPCAddr}, {"http_addr", j.HTTPAddr}} {
		if err := lease.ValidAddr(a.what, a.v); err != nil {
			return fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, sv := range f.Configuration().Servers {
		switch {
		case string(sv.ID) == j.ID && string(sv.Address) != j.RaftAddr:
			return fmt.Errorf("%w: %q is a member at %s; remove it before it joins from %s", ErrJoinRefused, j.ID, sv.Address, j.RaftAddr)
		case string(sv.ID) != j.ID && string(sv.Address) == j.RaftAddr:
			return fmt.Errorf("%w: raft address %s is member %q's", ErrJoinRefused, j.RaftAddr, sv.ID)
		case string(sv.ID) == j.ID:
			if n, ok := s.fsm.node(j.ID); ok && (n.GRPCAddr != j.GRPCAddr || n.HTTPAddr != j.HTTPAddr) {
				return fmt.Errorf("%w: %q is a member with gRPC %s and HTTP %s; remove it before it changes them",
					ErrJoinRefused, j.ID, n.GRPCAddr, n.HTTPAddr)
			}
		}
	}
	// The node must answer for itself: its admin API names its id and raft
	// address.
	cctx, cancel := context.WithTimeout(ctx, joinProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, s.httpScheme()+"://"+j.HTTPAddr+"/v1/cluster", nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	// With TLS, the client also checks that the node holds a manager's
	// certificate from the cluster's CA.
	resp, err := s.adminClient(joinProbeTimeout).Do(req)
	if err != nil {
		return fmt.Errorf("%w: node %q does not answer at %s: %w", ErrJoinRefused, j.ID, j.HTTPAddr, err)
	}
	defer resp.Body.Close()
	var c clusterJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAdminBody)).Decode(&c); err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s does not answer as a fuge-manager (%s)", ErrJoinRefused, j.HTTPAddr, resp.Status)
	}
	if c.NodeID != j.ID || c.RaftAddr != j.RaftAddr {
		return fmt.Errorf("%w: the node at %s is %q with raft address %s, not %q at %s",
			ErrJoinRefused, j.HTTPAddr, c.NodeID, c.RaftAddr, j.ID, j.RaftAddr)
	}
	return nil
}

// joinProbeTimeout bounds the leader's call to a joining node.
const joinProbeTimeout = 3 * time.Second

// postJSON posts body to a member's admin API at addr+path with the admin
// token, if any, following redirects to the leader (with the token: the
// leader is another member of the same cluster).
func (s *Server) postJSON(addr, path string, body []byte, token string) error {
	req, err := http.NewRequest(http.MethodPost, s.httpScheme()+"://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := s.adminClient(30 * time.Second)
	c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

type namespaceJSON struct {
	Name          string `json:"name"`
	RingSize      int    `json:"ring_size"`
	Header        string `json:"header"`
	LeaseDuration string `json:"lease_duration"`
	// The balancing policy and its knobs (NamespaceConfig.Balance...).
	Balance         string  `json:"balance,omitempty"`
	BalanceInterval string  `json:"balance_interval,omitempty"`
	BalanceMaxMoves int     `json:"balance_max_moves,omitempty"`
	BalanceMinLoad  float64 `json:"balance_min_load,omitempty"`
}

func nsJSON(nc NamespaceConfig) namespaceJSON {
	return namespaceJSON{Name: nc.Name, RingSize: nc.RingSize, Header: nc.Header, LeaseDuration: nc.LeaseDuration.String(),
		Balance: nc.Balance, BalanceInterval: nc.BalanceInterval.String(), BalanceMaxMoves: nc.BalanceMaxMoves, BalanceMinLoad: nc.BalanceMinLoad}
}

func (s *Server) getNamespaces(w http.ResponseWriter, _ *http.Request, l *leaderState) {
	var out []namespaceJSON
	err := l.do(func() error {
		for _, nc := range l.core.Namespaces() {
			out = append(out, nsJSON(nc))
		}
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespaces": append([]namespaceJSON{}, out...)})
}

func (s *Server) postNamespace(w http.ResponseWriter, r *http.Request, l *leaderState) {
	var in namespaceJSON
	if err := decodeBody(r, &in); err != nil {
		writeErr(w, err)
		return
	}
	nc := NamespaceConfig{Name: in.Name, RingSize: in.RingSize, Header: in.Header,
		Balance: in.Balance, BalanceMaxMoves: in.BalanceMaxMoves, BalanceMinLoad: in.BalanceMinLoad}
	if in.LeaseDuration != "" {
		d, err := time.ParseDuration(in.LeaseDuration)
		if err != nil || d <= 0 {
			writeErr(w, fmt.Errorf("%w: lease_duration %q", ErrBadRequest, in.LeaseDuration))
			return
		}
		nc.LeaseDuration = d
	}
	if in.BalanceInterval != "" {
		d, err := time.ParseDuration(in.BalanceInterval)
		if err != nil || d <= 0 {
			writeErr(w, fmt.Errorf("%w: balance_interval %.40q", ErrBadRequest, in.BalanceInterval))
			return
		}
		nc.BalanceInterval = d
	}
	if in.BalanceMaxMoves < 0 || in.BalanceMinLoad < 0 {
		writeErr(w, fmt.Errorf("%w: balance_max_moves and balance_min_load must not be negative", ErrBadRequest))
		return
	}
	if err := nc.defaults(Config{LeaseDuration: s.cfg.LeaseDuration}); err != nil {
		writeErr(w, err)
		return
	}
	err := l.do(func() error {
		if err := s.apply(command{Op: "create", Namespace: &nc}); err != nil {
			return err
		}
		return l.core.CreateNamespace(nc, s.cfg.Clock.Now())
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, nsJSON(nc))
}

// balanceJSON is the body of PUT /v1/namespaces/{ns}/balance: the
// namespace's balancing policy and knobs; an omitted knob takes its
// default, as at creation.
type balanceJSON struct {
	Balance         string  `json:"balance"`
	BalanceInterval string  `json:"balance_interval,omitempty"`
	BalanceMaxMoves int     `json:"balance_max_moves,omitempty"`
	BalanceMinLoad  float64 `json:"balance_min_load,omitempty"`
}

// putBalance changes a namespace's balancing policy after its creation:
// checked, committed (op balance), then applied to the leader's core.
func (s *Server) putBalance(w http.ResponseWriter, r *http.Request, l *leaderState) {
	var in balanceJSON
	if err := decodeBody(r, &in); err != nil {
		writeErr(w, err)
		return
	}
	nc := NamespaceConfig{Name: r.PathValue("ns"), Balance: in.Balance, BalanceMaxMoves: in.BalanceMaxMoves, BalanceMinLoad: in.BalanceMinLoad}
	if in.BalanceInterval != "" {
		d, err := time.ParseDuration(in.BalanceInterval)
		if err != nil || d <= 0 {
			writeErr(w, fmt.Errorf("%w: balance_interval %.40q", ErrBadRequest, in.BalanceInterval))
			return
		}
		nc.BalanceInterval = d
	}
	if in.BalanceMaxMoves < 0 || in.BalanceMinLoad < 0 {
		writeErr(w, fmt.Errorf("%w: balance_max_moves and balance_min_load must not be negative", ErrBadRequest))
		return
	}
	var out NamespaceConfig
	err := l.do(func() error {
		c, err := l.core.BalanceConfig(nc)
		if err != nil {
			return err
		}
		if err := s.apply(command{Op: opBalance, Namespace: &nc}); err != nil {
			return err
		}
		out = c
		return l.core.SetBalance(nc)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nsJSON(out))
}

func (s *Server) deleteNamespace(w http.ResponseWriter, r *http.Request, l *leaderState) {
	ns := r.PathValue("ns")
	err := l.do(func() error {
		if err := s.apply(command{Op: "delete", Name: ns}); err != nil {
			return err
		}
		return l.core.DeleteNamespace(ns)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func hex16(x uint64) string { return fmt.Sprintf("%016x", x) }

func (s *Server) getRing(w http.ResponseWriter, r *http.Request, l *leaderState) {
	ns := r.PathValue("ns")
	type entry struct {
		Position string `json:"position"`
		Owner    string `json:"owner"`
		Index    int    `json:"index"`
	}
	out := struct {
		Namespace string `json:"namespace"`
		RingSize  int    `json:"ring_size"`
	}{Namespace: ns}
	// The loop hands over a copy of the ring (DesiredRing), and its
	// entries are listed off the loop (formatting 65,536 of them held the
	// leader's loop, and every owner's request behind it, for tens of ms).
	var rg *ring.Ring
	err := l.do(func() error {
		var err error
		if rg, err = l.core.DesiredRing(ns); err != nil {
			return err
		}
		n, _ := l.core.namespace(ns)
		out.RingSize = n.cfg.RingSize
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSONList(w, out, "entries", rg.Len(), func(p int) entry {
		e := rg.Entry(p)
		return entry{Position: hex16(e.Hash), Owner: rg.OwnerName(p), Index: int(e.Index)}
	})
}

func (s *Server) getLeases(w http.ResponseWriter, r *http.Request, l *leaderState) {
	ns := r.PathValue("ns")
	type arcJSON struct {
		Start      string `json:"start"`
		End        string `json:"end"`
		Owner      string `json:"owner"`
		Generation uint64 `json:"generation"`
		State      string `json:"state"`
		ExpiresAt  string `json:"expires_at"`
	}
	out := struct {
		Namespace string `json:"namespace"`
	}{Namespace: ns}
	// Read on the loop, formatted off it.
	var arcs []ArcInfo
	err := l.do(func() error {
		var err error
		arcs, err = l.core.Leases(ns)
		return err
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSONList(w, out, "arcs", len(arcs), func(i int) arcJSON {
		a := arcs[i]
		exp := ""
		if !a.Expiry.IsZero() {
			exp = a.Expiry.UTC().Format(time.RFC3339Nano)
		}
		return arcJSON{Start: hex16(a.Range.Start), End: hex16(a.Range.End), Owner: a.Owner,
			Generation: uint64(a.Gen), State: a.State.String(), ExpiresAt: exp}
	})
}

func (s *Server) getOwners(w http.ResponseWriter, r *http.Request, l *leaderState) {
	ns := r.PathValue("ns")
	type ownerJSON struct {
		Name      string `json:"name"`
		Addr      string `json:"addr"`
		VNodes    int    `json:"vnodes"`
		Draining  bool   `json:"draining"`
		LastHeard string `json:"last_heard"`
		// Load is the owner's latest load report (by default admitted
		// requests per second); LoadReported when the leader received it,
		// "" if never. RingShare is the fraction of the circle its arcs
		// cover in the desired ring.
		Load         float64 `json:"load"`
		LoadReported string  `json:"load_reported"`
		RingShare    float64 `json:"ring_share"`
	}
	type balanceJSON struct {
		Policy       string `json:"policy"`
		Rounds       uint64 `json:"rounds"`
		MovingRounds uint64 `json:"moving_rounds"`
		VNodesMoved  uint64 `json:"vnodes_moved"`
		RangesMoved  uint64 `json:"ranges_moved"`
	}
	out := struct {
		Namespace string      `json:"namespace"`
		Owners    []ownerJSON `json:"owners"`
		Balance   balanceJSON `json:"balance"`
	}{Namespace: ns, Owners: []ownerJSON{}}
	err := l.do(func() error {
		os, err := l.core.Owners(ns)
		if err != nil {
			return err
		}
		loads, _ := l.core.Loads(ns)
		shares, _ := l.core.RingShares(ns)
		for _, o := range os {
			oj := ownerJSON{Name: o.Name, Addr: o.Addr, VNodes: o.VNodes, Draining: o.Draining,
				LastHeard: o.LastHeard.UTC().Format(time.RFC3339Nano), RingShare: shares[o.Name]}
			if ld := loads[o.Name]; !ld.ReportedAt.IsZero() {
				oj.Load, oj.LoadReported = ld.Rate, ld.ReportedAt.UTC().Format(time.RFC3339Nano)
			}
			out.Owners = append(out.Owners, oj)
		}
		n, _ := l.core.namespace(ns)
		bs := n.bal.stats
		out.Balance = balanceJSON{Policy: n.cfg.Balance, Rounds: bs.Rounds, MovingRounds: bs.MovingRounds,
			VNodesMoved: bs.VNodesMoved, RangesMoved: bs.RangesMoved}
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// ViewEntry is one range of the lookups' view in the admin API.
type ViewEntry struct {
	Start      string `json:"start"`
	End        string `json:"end"`
	Owner      string `json:"owner"`
	Addr       string `json:"addr"`
	Generation uint64 `json:"generation"`
}

// getView serves the lookups' view: what every lookup converges to.
func (s *Server) getView(w http.ResponseWriter, r *http.Request, l *leaderState) {
	ns := r.PathValue("ns")
	out := struct {
		Namespace string `json:"namespace"`
		LSN       uint64 `json:"lsn"`
	}{Namespace: ns}
	// A copy of the view is taken on the loop; it is listed and formatted
	// off it.
	var list func() []lease.Entry
	err := l.do(func() error {
		var err error
		if list, err = l.core.viewSnapshot(ns); err != nil {
			return err
		}
		out.LSN, _ = l.core.LSN(ns)
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	view := list()
	writeJSONList(w, out, "entries", len(view), func(i int) ViewEntry {
		e := view[i]
		return ViewEntry{Start: hex16(e.Range.Start), End: hex16(e.Range.End),
			Owner: e.Owner, Addr: e.Addr, Generation: uint64(e.Gen)}
	})
}

func (s *Server) postDrain(w http.ResponseWriter, r *http.Request, l *leaderState) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	err := l.do(func() error {
		out, err := l.core.Drain(ns, name, s.cfg.Clock.Now())
		if err != nil {
			return err
		}
		if !l.process(out) {
			return ErrNotLeader
		}
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"namespace": ns, "owner": name, "draining": true})
}
