package wire

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
	"google.golang.org/protobuf/proto"
)

// reencode returns m after a trip through its wire encoding.
func reencode[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	return back
}

func TestRoundTrip(t *testing.T) {
	req := lease.LeaseRequest{
		Namespace: "ns", Owner: "a", Addr: "127.0.0.1:1",
		Header:   lease.Header{Nonce: 9, Seq: 3, PeerNonce: 4, AckSeq: 2},
		Held:     []lease.Lease{{Range: ring.Range{Start: 1, End: 5}, Gen: 7}, {Range: ring.Range{Start: ^uint64(0) - 1, End: 0}, Gen: 8}},
		Migrated: []ring.Range{{Start: 5, End: 9}},
		Refused:  []lease.Lease{{Range: ring.Range{Start: 9, End: 10}, Gen: 2}},
		Load: &lease.LoadReport{Rate: 12.5, Groups: make([]float64, lease.LoadGroups),
			Hot: []lease.HotKey{{Hash: 0xfedcba9876543210, Rate: 10}, {Hash: 3, Rate: 0.5}}},
	}
	req.Load.Groups[3] = 12.5
	got, err := RequestFrom(reencode(t, Request(req, false)))
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request round trip: %+v, %v", got, err)
	}
	leave := lease.LeaseRequest{
		Namespace: "ns", Owner: "a", Addr: "127.0.0.1:1",
		Header: lease.Header{Nonce: 9, Seq: 4, PeerNonce: 4, AckSeq: 3},
		Held:   []lease.Lease{}, Refused: []lease.Lease{}, Leaving: true,
	}
	if pb := Request(leave, false); !pb.Leaving {
		t.Fatal("Request dropped Leaving")
	}
	if got, err := RequestFrom(Request(leave, false)); err != nil || !reflect.DeepEqual(got, leave) {
		t.Fatalf("leaving request round trip: %+v, %v", got, err)
	}
	resp := lease.LeaseResponse{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 2, PeerNonce: 9, AckSeq: 3},
		Renew: []lease.Lease{{Range: ring.Full(), Gen: 3}}, Grant: []lease.Lease{}}
	gotResp, err := ResponseFrom(Response(resp, false))
	if err != nil || !reflect.DeepEqual(gotResp.Renew, resp.Renew) || gotResp.Header != resp.Header {
		t.Fatalf("response round trip: %+v, %v", gotResp, err)
	}
	e := lease.Entry{Range: ring.Range{Start: 3, End: 4}, Owner: "a", Addr: "x:1", Gen: 5}
	if ge, err := EntryFrom(Arc("ns", e)); err != nil || ge != e {
		t.Fatalf("arc round trip: %+v, %v", ge, err)
	}
}

func TestMalformed(t *testing.T) {
	good := Request(lease.LeaseRequest{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1}}, false)
	for name, mut := range map[string]func(*fugev1.LeaseRequest){
		"no namespace":  func(r *fugev1.LeaseRequest) { r.Namespace = "" },
		"no owner":      func(r *fugev1.LeaseRequest) { r.Owner = "" },
		"no header":     func(r *fugev1.LeaseRequest) { r.Header = nil },
		"zero nonce":    func(r *fugev1.LeaseRequest) { r.Header.Nonce = 0 },
		"zero seq":      func(r *fugev1.LeaseRequest) { r.Header.Seq = 0 },
		"nil lease":     func(r *fugev1.LeaseRequest) { r.Held = []*fugev1.Lease{nil} },
		"lease range":   func(r *fugev1.LeaseRequest) { r.Held = []*fugev1.Lease{{Gen: 1}} },
		"gen zero":      func(r *fugev1.LeaseRequest) { r.Held = []*fugev1.Lease{{Range: &fugev1.Range{}, Gen: 0}} },
		"nil migrated":  func(r *fugev1.LeaseRequest) { r.Migrated = []*fugev1.Range{nil} },
		"too many held": func(r *fugev1.LeaseRequest) { r.Held = make([]*fugev1.Lease, MaxLeases+1) },
		"load NaN":      func(r *fugev1.LeaseRequest) { r.Load = &fugev1.LoadReport{Rate: math.NaN()} },
		"load negative": func(r *fugev1.LeaseRequest) { r.Load = &fugev1.LoadReport{Rate: -1} },
		"load groups":   func(r *fugev1.LeaseRequest) { r.Load = &fugev1.LoadReport{Groups: make([]float64, 65)} },
		"too many hot": func(r *fugev1.LeaseRequest) {
			r.Load = &fugev1.LoadReport{Hot: make([]*fugev1.HotKey, lease.MaxHotKeys+1)}
		},
		"nil hot key": func(r *fugev1.LeaseRequest) { r.Load = &fugev1.LoadReport{Hot: []*fugev1.HotKey{nil}} },
		"hot key NaN": func(r *fugev1.LeaseRequest) {
			r.Load = &fugev1.LoadReport{Hot: []*fugev1.HotKey{{Hash: 1, Rate: math.NaN()}}}
		},
		"hot key twice": func(r *fugev1.LeaseRequest) { r.Load = &fugev1.LoadReport{Hot: []*fugev1.HotKey{{Hash: 1}, {Hash: 1}}} },
		"leaving, holding": func(r *fugev1.LeaseRequest) {
			r.Leaving = true
			r.Held = []*fugev1.Lease{{Range: &fugev1.Range{Start: 1, End: 2}, Gen: 1}}
		},
	} {
		r := proto.Clone(good).(*fugev1.LeaseRequest)
		mut(r)
		if _, err := RequestFrom(r); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	if _, err := EntryFrom(&fugev1.Arc{Range: &fugev1.Range{}, Owner: "a"}); !errors.Is(err, ErrMalformed) {
		t.Errorf("arc without address: %v", err)
	}
}

func FuzzRequestFrom(f *testing.F) {
	b, _ := proto.Marshal(Request(lease.LeaseRequest{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1},
		Held: []lease.Lease{{Range: ring.Range{Start: 1, End: 2}, Gen: 1}}}, false))
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var pb fugev1.LeaseRequest
		if proto.Unmarshal(data, &pb) != nil {
			return
		}
		req, err := RequestFrom(&pb)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to the same request, in
		// either form.
		for _, packed := range []bool{false, true} {
			again, err := RequestFrom(Request(req, packed))
			if err != nil || !reflect.DeepEqual(again, req) {
				t.Fatalf("re-encoding (packed %v) changed %+v to %+v (%v)", packed, req, again, err)
			}
		}
	})
}

// The packed form carries the same leases as the messages, through a real
// encoding, and says so only where asked: a peer that does not read it
// must never be sent it.
func TestPackedRoundTrip(t *testing.T) {
	held := []lease.Lease{{Range: ring.Range{Start: 1, End: 5}, Gen: 7}, {Range: ring.Range{Start: ^uint64(0) - 1, End: 0}, Gen: 8}, {Range: ring.Full(), Gen: 1 << 40}}
	req := lease.LeaseRequest{Namespace: "ns", Owner: "a", Addr: "127.0.0.1:1", Header: lease.Header{Nonce: 9, Seq: 3},
		Held: held, Refused: []lease.Lease{}}
	for _, packed := range []bool{false, true} {
		pb := Request(req, packed)
		if !pb.Packed {
			t.Errorf("packed %v: the request does not say its sender reads packed responses", packed)
		}
		if got := len(pb.HeldPacked) > 0; got != packed {
			t.Errorf("packed %v: held_packed set %v", packed, got)
		}
		if got := len(pb.Held) > 0; got == packed {
			t.Errorf("packed %v: held set %v", packed, got)
		}
		if got, err := RequestFrom(reencode(t, pb)); err != nil || !reflect.DeepEqual(got, req) {
			t.Errorf("packed %v: request round trip %+v, %v", packed, got, err)
		}
	}
	resp := lease.LeaseResponse{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 2, PeerNonce: 9, AckSeq: 3},
		Renew: held[:2], Grant: held[2:]}
	for _, packed := range []bool{false, true} {
		pb := Response(resp, packed)
		if !pb.Packed {
			t.Errorf("packed %v: the response does not say its sender reads packed requests", packed)
		}
		if got := len(pb.RenewPacked) == 6 && len(pb.GrantPacked) == 3; got != packed {
			t.Errorf("packed %v: renew_packed %d, grant_packed %d numbers", packed, len(pb.RenewPacked), len(pb.GrantPacked))
		}
		got, err := ResponseFrom(reencode(t, pb))
		if err != nil || !reflect.DeepEqual(got.Renew, resp.Renew) || !reflect.DeepEqual(got.Grant, resp.Grant) {
			t.Errorf("packed %v: response round trip %+v, %v", packed, got, err)
		}
	}
}

// Every packed field from outside is checked as the messages are: its
// length, the count it implies, each generation, and never both forms.
func TestPackedMalformed(t *testing.T) {
	good := Request(lease.LeaseRequest{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1}}, true)
	for name, tc := range map[string]struct {
		mut  func(*fugev1.LeaseRequest)
		want string
	}{
		"not three a lease": {func(r *fugev1.LeaseRequest) { r.HeldPacked = []uint64{1, 2, 3, 4} }, "not three a lease"},
		"gen zero":          {func(r *fugev1.LeaseRequest) { r.HeldPacked = []uint64{1, 2, 3, 4, 5, 0} }, "generation 0"},
		"too many":          {func(r *fugev1.LeaseRequest) { r.HeldPacked = make([]uint64, 3*(MaxLeases+1)) }, "at most"},
		"both forms": {func(r *fugev1.LeaseRequest) {
			r.HeldPacked = []uint64{1, 2, 3}
			r.Held = []*fugev1.Lease{{Range: &fugev1.Range{Start: 1, End: 2}, Gen: 3}}
		}, "both held and held_packed"},
		"leaving, holding": {func(r *fugev1.LeaseRequest) { r.Leaving, r.HeldPacked = true, []uint64{1, 2, 3} }, "leaving request holds 1"},
	} {
		r := proto.Clone(good).(*fugev1.LeaseRequest)
		tc.mut(r)
		if _, err := RequestFrom(r); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("request %s: err = %v, want ErrMalformed naming %q", name, err, tc.want)
		}
	}
	goodResp := Response(lease.LeaseResponse{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 2}}, true)
	for name, mut := range map[string]func(*fugev1.LeaseResponse){
		"renew not three a lease": func(r *fugev1.LeaseResponse) { r.RenewPacked = []uint64{1} },
		"grant gen zero":          func(r *fugev1.LeaseResponse) { r.GrantPacked = []uint64{1, 2, 0} },
		"renew both forms": func(r *fugev1.LeaseResponse) {
			r.RenewPacked = []uint64{1, 2, 3}
			r.Renew = []*fugev1.Lease{{Range: &fugev1.Range{Start: 1, End: 2}, Gen: 3}}
		},
		"grant both forms": func(r *fugev1.LeaseResponse) {
			r.GrantPacked = []uint64{1, 2, 3}
			r.Grant = []*fugev1.Lease{{Range: &fugev1.Range{Start: 1, End: 2}, Gen: 3}}
		},
	} {
		r := proto.Clone(goodResp).(*fugev1.LeaseResponse)
		mut(r)
		if _, err := ResponseFrom(r); !errors.Is(err, ErrMalformed) {
			t.Errorf("response %s: err = %v, want ErrMalformed", name, err)
		}
	}
}

// A renewal of an owner holding a quarter of R=4096, in both forms: what
// the manager and the owner each decode every T/4.
func BenchmarkRenewalDecode(b *testing.B) {
	held := make([]lease.Lease, 1024)
	for i := range held {
		held[i] = lease.Lease{Range: ring.Range{Start: uint64(i) << 52, End: uint64(i)<<52 + 1<<50}, Gen: lease.Gen(i + 1)}
	}
	req := lease.LeaseRequest{Namespace: "ns", Owner: "a", Addr: "127.0.0.1:1", Header: lease.Header{Nonce: 9, Seq: 3}, Held: held}
	for _, packed := range []bool{false, true} {
		name := "messages"
		if packed {
			name = "packed"
		}
		b.Run(name, func(b *testing.B) {
			buf, err := proto.Marshal(Request(req, packed))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				var pb fugev1.LeaseRequest
				if err := proto.Unmarshal(buf, &pb); err != nil {
					b.Fatal(err)
				}
				if _, err := RequestFrom(&pb); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
