package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

func TestMigrationRoundTrip(t *testing.T) {
	req := lease.LeaseRequest{Namespace: "ns", Owner: "a", Addr: "h:1", Header: lease.Header{Nonce: 1, Seq: 1},
		Held: []lease.Lease{}, Refused: []lease.Lease{},
		Migrated: []ring.Range{{Start: 1, End: 2}}, MigrationAddr: "127.0.0.1:9", Handover: true}
	if got, err := RequestFrom(Request(req, false)); err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request round trip: %+v, %v", got, err)
	}
	m := lease.Migration{Range: ring.Range{Start: 5, End: 9}, Gen: 4, Peer: "b", PeerAddr: "127.0.0.1:7"}
	resp := lease.LeaseResponse{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 2},
		MigrateOut: []lease.Migration{m}, MigrateIn: []lease.Migration{m, m}}
	got, err := ResponseFrom(Response(resp, false))
	if err != nil || !reflect.DeepEqual(got.MigrateOut, resp.MigrateOut) || !reflect.DeepEqual(got.MigrateIn, resp.MigrateIn) {
		t.Fatalf("response round trip: %+v, %v", got, err)
	}
	e := lease.Entry{Range: ring.Range{Start: 3, End: 4}, Owner: "a", Addr: "x:1", Gen: 5, MigratedFrom: 2}
	if ge, err := EntryFrom(Arc("ns", e)); err != nil || ge != e {
		t.Fatalf("arc round trip: %+v, %v", ge, err)
	}
}

// Every migration field from outside is validated, and refused with an
// error that names it.
func TestMigrationMalformed(t *testing.T) {
	good := Response(lease.LeaseResponse{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 2},
		MigrateOut: []lease.Migration{{Range: ring.Range{Start: 5, End: 9}, Gen: 4, Peer: "b", PeerAddr: "127.0.0.1:7"}}}, false)
	for name, tc := range map[string]struct {
		mut  func(*fugev1.LeaseResponse)
		want string
	}{
		"nil order":      {func(r *fugev1.LeaseResponse) { r.MigrateIn = []*fugev1.MigrationOrder{nil} }, "migrate_in"},
		"no range":       {func(r *fugev1.LeaseResponse) { r.MigrateOut[0].Range = nil }, "range"},
		"gen zero":       {func(r *fugev1.LeaseResponse) { r.MigrateOut[0].Gen = 0 }, "generation 0"},
		"bad peer":       {func(r *fugev1.LeaseResponse) { r.MigrateOut[0].Peer = "b/../c" }, "migrate_out.peer"},
		"empty peer":     {func(r *fugev1.LeaseResponse) { r.MigrateOut[0].Peer = "" }, "migrate_out.peer"},
		"bad peer addr":  {func(r *fugev1.LeaseResponse) { r.MigrateOut[0].PeerAddr = "nohost" }, "migrate_out.peer_addr"},
		"port zero":      {func(r *fugev1.LeaseResponse) { r.MigrateOut[0].PeerAddr = "h:0" }, "migrate_out.peer_addr"},
		"too many":       {func(r *fugev1.LeaseResponse) { r.MigrateIn = make([]*fugev1.MigrationOrder, MaxLeases+1) }, "migrate_in orders"},
		"long peer addr": {func(r *fugev1.LeaseResponse) { r.MigrateOut[0].PeerAddr = strings.Repeat("h", 300) + ":1" }, "peer_addr"},
	} {
		r := proto.Clone(good).(*fugev1.LeaseResponse)
		tc.mut(r)
		if _, err := ResponseFrom(r); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrMalformed naming %q", name, err, tc.want)
		}
	}
	req := Request(lease.LeaseRequest{Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1}}, false)
	req.MigrationAddr = "not an address"
	if _, err := RequestFrom(req); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "migration_addr") {
		t.Errorf("bad migration_addr: %v", err)
	}
	if _, err := EntryFrom(&fugev1.Arc{Range: &fugev1.Range{}, Gen: 3, MigratedFrom: 3}); !errors.Is(err, ErrMalformed) {
		t.Errorf("arc migrated from its own generation: %v", err)
	}
}
