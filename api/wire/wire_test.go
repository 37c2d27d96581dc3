package wire

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
	"google.golang.org/protobuf/proto"
)

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
	b, err := proto.Marshal(Request(req))
	if err != nil {
		t.Fatal(err)
	}
	var pb fugev1.LeaseRequest
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	got, err := RequestFrom(&pb)
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request round trip: %+v, %v", got, err)
	}
	leave := lease.LeaseRequest{
		Namespace: "ns", Owner: "a", Addr: "127.0.0.1:1",
		Header: lease.Header{Nonce: 9, Seq: 4, PeerNonce: 4, AckSeq: 3},
		Held:   []lease.Lease{}, Refused: []lease.Lease{}, Leaving: true,
	}
	if pb := Request(leave); !pb.Leaving {
		t.Fatal("Request dropped Leaving")
	}
	if got, err := RequestFrom(Request(leave)); err != nil || !reflect.DeepEqual(got, leave) {
		t.Fatalf("leaving request round trip: %+v, %v", got, err)
	}
	resp := lease.LeaseResponse{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 2, PeerNonce: 9, AckSeq: 3},
		Renew: []lease.Lease{{Range: ring.Full(), Gen: 3}}, Grant: []lease.Lease{}}
	gotResp, err := ResponseFrom(Response(resp))
	if err != nil || !reflect.DeepEqual(gotResp.Renew, resp.Renew) || gotResp.Header != resp.Header {
		t.Fatalf("response round trip: %+v, %v", gotResp, err)
	}
	e := lease.Entry{Range: ring.Range{Start: 3, End: 4}, Owner: "a", Addr: "x:1", Gen: 5}
	if ge, err := EntryFrom(Arc("ns", e)); err != nil || ge != e {
		t.Fatalf("arc round trip: %+v, %v", ge, err)
	}
}

func TestMalformed(t *testing.T) {
	good := Request(lease.LeaseRequest{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1}})
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
		Held: []lease.Lease{{Range: ring.Range{Start: 1, End: 2}, Gen: 1}}}))
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
		// Whatever decodes must encode back to the same request.
		again, err := RequestFrom(Request(req))
		if err != nil || !reflect.DeepEqual(again, req) {
			t.Fatalf("re-encoding changed %+v to %+v (%v)", req, again, err)
		}
	})
}
