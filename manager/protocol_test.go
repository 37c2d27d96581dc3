package manager_test

// Golden scripts for the owner–manager protocol (etcd-io/raft's
// interaction_test style): the manager's lease core and real Owner cores
// exchange messages through an explicit in-flight queue that a script
// delivers, drops and reorders. Regenerate with
//
//	go test ./manager -run TestProtocol -rewrite

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

func TestProtocol(t *testing.T) {
	datadriven.Walk(t, "testdata/protocol", func(t *testing.T, path string) {
		h := &harness{t: t}
		datadriven.RunTest(t, path, h.run)
	})
}

type msg struct {
	from string // the sending process's label, for requests
	to   string // "mgr" or a process label
	req  *lease.LeaseRequest
	res  *lease.LeaseResponse
}

// An owner process is named by its label: the owner name, or, for a second
// process under a name that is already running, the label given with as=.
// Manager messages for an owner name go to the process of that name whose
// incarnation they address, else to the one started last.
type harness struct {
	t           *testing.T
	now         time.Time
	mgr         *manager.Manager
	cfg         manager.Config
	state       manager.NamespaceState // the replicated state, from the commits
	T           time.Duration
	owners      map[string]*ownerguard.Core // by process label
	latest      map[string]string           // owner name -> label of the process started last
	incarnation map[string]uint64
	cut         map[string]bool // by process label, or "mgr"
	flight      []msg
	out         strings.Builder
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *harness) printf(format string, args ...any) { fmt.Fprintf(&h.out, format+"\n", args...) }

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.out.Reset()
	switch d.Cmd {
	case "init":
		h.init(t, d)
	case "start":
		var name string
		d.ScanArgs(t, "name", &name)
		label := name
		d.MaybeScanArgs(t, "as", &label)
		h.start(name, label)
	case "crash":
		var name string
		d.ScanArgs(t, "name", &name)
		delete(h.owners, name)
		h.printf("%s crashed", name)
	case "failover":
		// The leader's lease core is replaced by one restored from the
		// replicated state under a new nonce, as a new raft leader does.
		h.cfg.Nonce++
		m, err := manager.Restore(h.cfg, []manager.NamespaceState{h.state}, h.now)
		if err != nil {
			t.Fatal(err)
		}
		h.mgr = m
		h.printf("manager failover: new nonce=%x, restored at LSN %d", h.cfg.Nonce, h.state.LSN)
		h.managerOutput(m.Tick(h.now))
	case "leave":
		// A clean leave, as Owner.Close does it: the core stops believing,
		// then its last request (Held empty, leaving) is sent.
		var name string
		d.ScanArgs(t, "name", &name)
		c := h.owners[name]
		if c == nil {
			t.Fatalf("%s is not running", name)
		}
		h.printf("%s leaves", name)
		h.ownerOutput(name, c.Leave(h.now))
	case "partition", "heal":
		var name string
		d.ScanArgs(t, "name", &name)
		h.cut[name] = d.Cmd == "partition"
	case "deliver":
		h.deliver(t, d)
	case "advance":
		var s string
		d.ScanArgs(t, "by", &s)
		dur, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		h.advance(dur, d.HasArg("deliver"))
	case "drain":
		var name string
		d.ScanArgs(t, "name", &name)
		out, err := h.mgr.Drain("ns", name, h.now)
		if err != nil {
			h.printf("error: %v", err)
		}
		h.managerOutput(out)
	case "leases":
		h.leases()
	case "held":
		h.held()
	case "inflight":
		for _, m := range h.flight {
			h.printf("%s", h.describe(m))
		}
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	return h.out.String()
}

func (h *harness) init(t *testing.T, d *datadriven.TestData) {
	r := 8
	d.MaybeScanArgs(t, "ring", &r)
	h.T = 60 * time.Second
	cfg := manager.DefaultConfig()
	cfg.LeaseDuration, cfg.RaceBackoffMin, cfg.RaceBackoffMax = h.T, h.T/600, h.T/60
	cfg.Nonce = 0xAA
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	if d.HasArg("unfiltered") {
		cfg.DisableRaceFilter = true
	}
	m, err := manager.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.now = t0
	if err := m.CreateNamespace(manager.NamespaceConfig{Name: "ns", RingSize: r}, h.now); err != nil {
		t.Fatal(err)
	}
	st, err := manager.NewNamespaceState(manager.NamespaceConfig{Name: "ns", RingSize: r}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.mgr, h.cfg, h.state = m, cfg, st
	h.owners, h.latest, h.incarnation, h.cut, h.flight = map[string]*ownerguard.Core{}, map[string]string{}, map[string]uint64{}, map[string]bool{}, nil
	h.printf("manager nonce=%x ring=%d T=%v hold=%v", cfg.Nonce, r, h.T, manager.HoldDuration(h.T))
}

func (h *harness) start(name, label string) {
	h.incarnation[name]++
	cfg := ownerguard.DefaultCoreConfig()
	cfg.RenewInterval, cfg.RaceBackoffMin, cfg.RaceBackoffMax = 0, 0, 0 // scale with T
	cfg.Namespace, cfg.Name, cfg.Addr = "ns", name, name+":80"
	cfg.Incarnation = uint64(name[0])<<8 | h.incarnation[name]
	cfg.LeaseDuration = h.T
	cfg.Rand = rand.New(rand.NewPCG(3, h.incarnation[name]))
	c, err := ownerguard.NewCore(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.owners[label] = c
	h.latest[name] = label
	if label != name {
		h.printf("%s started incarnation=%x as %s", name, cfg.Incarnation, label)
	} else {
		h.printf("%s started incarnation=%x", name, cfg.Incarnation)
	}
	h.ownerOutput(label, c.Start(h.now))
}

// send queues a message unless its sender or receiver is partitioned.
func (h *harness) send(from string, m msg) {
	if h.cut[from] || h.cut[m.to] {
		h.printf("  lost (partition): %s", h.describe(m))
		return
	}
	h.flight = append(h.flight, m)
	h.printf("  %s", h.describe(m))
}

func (h *harness) ownerOutput(label string, o ownerguard.Output) {
	if len(o.Granted) > 0 || len(o.Revoked) > 0 {
		h.printf("  %s upcall: granted %s revoked %s", label, ranges(o.Granted), ranges(o.Revoked))
	}
	if o.Send != nil {
		h.send(label, msg{from: label, to: "mgr", req: o.Send})
	}
}

func (h *harness) managerOutput(o manager.Output) {
	if err := h.mgr.Verify(); err != nil {
		h.t.Fatal(err)
	}
	for _, nc := range o.Commits {
		if err := h.state.Apply(nc, h.cfg.LogRetention); err != nil {
			h.t.Fatalf("replicated state: %v", err)
		}
		for _, c := range nc.Changes {
			clean := ""
			if c.Clean {
				clean = " clean"
			}
			h.printf("  commit lsn=%d %s -> %q gen=%d%s", c.LSN, rng(c.Entry.Range), c.Entry.Owner, c.Entry.Gen, clean)
		}
	}
	for i := range o.Send {
		h.send("mgr", msg{to: h.addressee(o.Send[i]), res: &o.Send[i]})
	}
}

// addressee is the label of the process a manager message goes to.
func (h *harness) addressee(r lease.LeaseResponse) string {
	for _, label := range sortedNames(h.owners) {
		if c := h.owners[label]; c.Config().Name == r.Owner && c.Config().Incarnation == r.PeerNonce {
			return label
		}
	}
	if l, ok := h.latest[r.Owner]; ok {
		return l
	}
	return r.Owner
}

// deliver hands in-flight messages to their receivers: the oldest one to
// `to` (n of them), or, with no argument, everything until quiet. With
// `drop`, the chosen messages are lost instead.
func (h *harness) deliver(t *testing.T, d *datadriven.TestData) {
	to, n := "", 1
	d.MaybeScanArgs(t, "to", &to)
	d.MaybeScanArgs(t, "n", &n)
	drop := d.HasArg("drop")
	if to == "" && !drop {
		for steps := 0; len(h.flight) > 0; steps++ {
			if steps > 1000 {
				t.Fatal("messages keep flowing")
			}
			m := h.flight[0]
			h.flight = h.flight[1:]
			h.receive(m)
		}
		return
	}
	for k := 0; k < n; k++ {
		i := slices.IndexFunc(h.flight, func(m msg) bool { return to == "" || m.to == to })
		if i < 0 {
			h.printf("nothing in flight to %q", to)
			return
		}
		m := h.flight[i]
		h.flight = slices.Delete(h.flight, i, i+1)
		if drop {
			h.printf("dropped %s", h.describe(m))
			continue
		}
		h.receive(m)
	}
}

func (h *harness) receive(m msg) {
	h.printf("%s", h.describe(m))
	if m.req != nil {
		before := h.mgr.Stats()
		out, err := h.mgr.Request(*m.req, h.now)
		if err != nil {
			h.printf("  error: %v", err)
			return
		}
		h.noteManagerDrops(before, h.mgr.Stats())
		h.managerOutput(out)
		return
	}
	c := h.owners[m.to]
	if c == nil {
		h.printf("  %s is down: lost", m.to)
		return
	}
	if c.Left() {
		h.printf("  %s has left: ignored", m.to)
		return
	}
	before := c.Stats()
	o := c.Step(*m.res, h.now)
	after := c.Stats()
	switch {
	case after.DroppedRacing > before.DroppedRacing:
		h.printf("  %s dropped it: racing (it acknowledges seq %d, not %s's latest request)", m.to, m.res.AckSeq, m.to)
	case after.DroppedStale > before.DroppedStale:
		h.printf("  %s dropped it: stale", m.to)
	case after.DroppedOtherIncarnation > before.DroppedOtherIncarnation:
		h.printf("  %s dropped it: addressed to another incarnation", m.to)
	case after.Refused > before.Refused:
		h.printf("  %s refused %d renewal(s) of leases it does not hold", m.to, after.Refused-before.Refused)
	}
	h.ownerOutput(m.to, o)
}

func (h *harness) noteManagerDrops(b, a manager.Stats) {
	switch {
	case a.DroppedRacing > b.DroppedRacing:
		h.printf("  mgr dropped it: racing (it does not acknowledge the manager's latest)")
	case a.DroppedStale > b.DroppedStale:
		h.printf("  mgr dropped it: stale")
	case a.DroppedOld > b.DroppedOld:
		h.printf("  mgr dropped it: from an ended incarnation")
	}
}

// advance moves the clock and runs every timer that came due, in order.
// With deliver, every message is delivered as soon as it is sent (a network
// with no delay), after each timer.
func (h *harness) advance(d time.Duration, deliver bool) {
	end := h.now.Add(d)
	for {
		if deliver {
			for steps := 0; len(h.flight) > 0; steps++ {
				if steps > 1000 {
					h.t.Fatal("messages keep flowing")
				}
				m := h.flight[0]
				h.flight = h.flight[1:]
				h.receive(m)
			}
		}
		next, who := end, ""
		if t := h.mgr.NextDeadline(); !t.IsZero() && !t.After(next) {
			next, who = t, "mgr"
		}
		for _, name := range sortedNames(h.owners) {
			if t := h.owners[name].NextDeadline(); !t.IsZero() && (t.Before(next) || (who == "" && t.Equal(next))) {
				next, who = t, name
			}
		}
		if who == "" {
			break
		}
		h.now = next
		h.printf("at +%v %s timer", h.now.Sub(t0), who)
		if who == "mgr" {
			h.managerOutput(h.mgr.Tick(h.now))
		} else {
			h.ownerOutput(who, h.owners[who].Tick(h.now))
		}
	}
	h.now = end
	h.printf("now +%v", h.now.Sub(t0))
}

func (h *harness) leases() {
	arcs, err := h.mgr.Leases("ns")
	if err != nil {
		h.printf("error: %v", err)
		return
	}
	for _, a := range arcs {
		exp := ""
		if !a.Expiry.IsZero() {
			exp = fmt.Sprintf(" until +%v", a.Expiry.Sub(t0))
		}
		if a.Orphan {
			exp += " orphan"
		}
		h.printf("%s %-9s %-3q gen=%d%s", rng(a.Range), a.State, a.Owner, a.Gen, exp)
	}
}

func (h *harness) held() {
	for _, name := range sortedNames(h.owners) {
		var parts []string
		for _, l := range h.owners[name].Held(h.now) {
			parts = append(parts, fmt.Sprintf("%s@%d", rng(l.Range), l.Gen))
		}
		h.printf("%s holds [%s]", name, strings.Join(parts, " "))
	}
}

func (h *harness) describe(m msg) string {
	if m.req != nil {
		r := m.req
		var held []string
		for _, l := range r.Held {
			held = append(held, fmt.Sprintf("%s@%d", rng(l.Range), l.Gen))
		}
		leaving := ""
		if r.Leaving {
			leaving = " leaving"
		}
		return fmt.Sprintf("%s -> mgr: seq=%d ack=%d held=[%s]%s", m.from, r.Seq, r.AckSeq, strings.Join(held, " "), leaving)
	}
	r := m.res
	return fmt.Sprintf("mgr -> %s: seq=%d ack=%d renew=%s grant=%s", m.to, r.Seq, r.AckSeq, leases(r.Renew), leases(r.Grant))
}

func leases(ls []lease.Lease) string {
	var p []string
	for _, l := range ls {
		p = append(p, fmt.Sprintf("%s@%d", rng(l.Range), l.Gen))
	}
	return "[" + strings.Join(p, " ") + "]"
}

func ranges(rs []ring.Range) string {
	var p []string
	for _, r := range rs {
		p = append(p, rng(r))
	}
	return "[" + strings.Join(p, " ") + "]"
}

// rng prints a range by the top 16 bits of its ends, enough to tell the
// arcs of a small ring apart.
func rng(r ring.Range) string {
	if r.IsFull() {
		return "(all)"
	}
	return fmt.Sprintf("(%04x,%04x]", r.Start>>48, r.End>>48)
}

func sortedNames[V any](m map[string]V) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}
