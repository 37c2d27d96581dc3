package lb

import (
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// event is one call on a Core in a scripted timeline.
type event struct {
	at   int                   // seconds after t0
	resp *lease.LookupResponse // Step when set, else Tick
	send *lease.LookupRequest  // wanted Send, nil for none
	loss []ring.Range          // wanted Loss
	all  bool                  // wanted LossAll
	next int                   // wanted NextDeadline after the call, seconds after t0
}

func req(nonce, lsn uint64) *lease.LookupRequest {
	return &lease.LookupRequest{Namespace: ns, Lookup: "fe1", ManagerNonce: nonce, LSN: lsn}
}

func respp(r lease.LookupResponse) *lease.LookupResponse { return &r }

func TestTimeline(t *testing.T) {
	full := []ring.Range{ring.Full()}
	tests := []struct {
		name   string
		cfg    CoreConfig
		events []event
	}{
		{
			name: "periodic poll",
			events: []event{
				{at: 9, next: 10},
				{at: 10, send: req(0, 0), next: 20},
				{at: 15, resp: respp(snap(7, 10, base...)), next: 25}, // poll restarts at a sync
				{at: 20, next: 25},
				{at: 24, next: 25},
				{at: 25, send: req(7, 10), next: 35},
				{at: 37, resp: respp(delta(7, 10, 10)), next: 47},
				{at: 47, send: req(7, 10), next: 57},
			},
		},
		{
			name: "staleness fires once, resets after a sync",
			events: []event{
				{at: 1, resp: respp(snap(7, 10, base...)), next: 11},
				{at: 11, send: req(7, 10), next: 21},
				{at: 21, send: req(7, 10), next: 31},
				{at: 30, next: 31}, // 29 s since the sync
				{at: 31, send: req(7, 10), loss: full, all: true, next: 41},
				{at: 41, send: req(7, 10), next: 51}, // no second LossAll
				{at: 60, send: req(7, 10), next: 70},
				{at: 61, resp: respp(delta(7, 10, 10)), next: 71},
				{at: 71, send: req(7, 10), next: 81},
				{at: 81, send: req(7, 10), next: 91},
				{at: 90, next: 91},
				{at: 91, send: req(7, 10), loss: full, all: true, next: 101},
			},
		},
		{
			name: "stale table diffs again after the sync",
			events: []event{
				{at: 1, resp: respp(snap(7, 10, base...)), next: 11},
				{at: 31, send: req(7, 10), loss: full, all: true, next: 41},
				{at: 35, resp: respp(delta(7, 10, 11, chg(ent(q, 2*q, "c", 4)))),
					loss: []ring.Range{rg(q, 2*q)}, next: 45},
				{at: 65, send: req(7, 11), loss: full, all: true, next: 75},
			},
		},
		{
			name: "staleness clock starts at Start",
			events: []event{
				{at: 29, send: req(0, 0), next: 30}, // late Tick: poll due at 10
				{at: 30, loss: full, all: true, next: 39},
				{at: 39, send: req(0, 0), next: 49},
			},
		},
		{
			name: "staleness deadline before the poll",
			cfg:  CoreConfig{Namespace: ns, Name: "fe1", SyncInterval: 10 * time.Second, StalenessBound: 25 * time.Second},
			events: []event{
				{at: 10, send: req(0, 0), next: 20},
				{at: 20, send: req(0, 0), next: 25},
				{at: 25, loss: full, all: true, next: 30},
			},
		},
		{
			name: "gap and nonce requests do not move the poll",
			events: []event{
				{at: 1, resp: respp(snap(7, 10, base...)), next: 11},
				{at: 3, resp: respp(delta(7, 12, 13)), send: req(7, 10), next: 11},
				{at: 4, resp: respp(delta(9, 10, 11)), send: req(7, 10), next: 11},
				{at: 5, resp: respp(delta(7, 10, 12)), next: 15},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.Namespace == "" {
				cfg = CoreConfig{Namespace: ns, Name: "fe1"}
			}
			c, err := NewCore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !c.NextDeadline().IsZero() {
				t.Fatalf("NextDeadline before Start = %v", c.NextDeadline())
			}
			if out := c.Tick(at(100)); out.Send != nil || out.Loss != nil {
				t.Fatalf("Tick before Start = %+v", out)
			}
			if out := c.Start(t0); out.Send == nil || *out.Send != *req(0, 0) {
				t.Fatalf("Start = %+v", out)
			}
			for _, ev := range tt.events {
				var out Output
				if ev.resp != nil {
					out = c.Step(*ev.resp, at(ev.at))
				} else {
					out = c.Tick(at(ev.at))
				}
				if (out.Send == nil) != (ev.send == nil) || (out.Send != nil && *out.Send != *ev.send) {
					t.Errorf("t=%d: Send = %+v, want %+v", ev.at, out.Send, ev.send)
				}
				if !slices.Equal(out.Loss, ev.loss) || out.LossAll != ev.all {
					t.Errorf("t=%d: Loss = %v all=%v, want %v all=%v", ev.at, out.Loss, out.LossAll, ev.loss, ev.all)
				}
				if got := c.NextDeadline(); !got.Equal(at(ev.next)) {
					t.Errorf("t=%d: NextDeadline = +%v, want +%ds", ev.at, got.Sub(t0), ev.next)
				}
			}
		})
	}
}

func TestLossAllCount(t *testing.T) {
	c := started(t)
	for s := 2; s < 200; s++ {
		c.Tick(at(s))
	}
	if st := c.Stats(); st.LossAll != 1 || st.LossNotifications != 0 {
		t.Fatalf("stats %+v, want one LossAll", st)
	}
	c.Step(snap(7, 11, base...), at(200))
	for s := 201; s < 400; s++ {
		c.Tick(at(s))
	}
	if st := c.Stats(); st.LossAll != 2 {
		t.Fatalf("stats %+v, want a second LossAll after a sync", st)
	}
}
