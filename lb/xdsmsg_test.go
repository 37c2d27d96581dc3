package lb

import (
	"errors"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
)

func arcResource(t testing.TB, name string, m proto.Message, typeURL string) *discovery.Resource {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &discovery.Resource{Name: name, Version: "v", Resource: &anypb.Any{TypeUrl: typeURL, Value: b}}
}

func TestDecodeArcs(t *testing.T) {
	good := ent(q, 2*q, "b", 2)
	name := wire.ArcName(ns, good.Range)
	tests := []struct {
		name string
		res  *discovery.Resource
		ok   bool
	}{
		{"good", arcResource(t, name, wire.Arc(ns, good), ArcTypeURL), true},
		{"free arc", arcResource(t, name, wire.Arc(ns, ent(q, 2*q, "", 3)), ArcTypeURL), true},
		{"no body", &discovery.Resource{Name: name}, false},
		{"wrong type", arcResource(t, name, wire.Arc(ns, good), HeartbeatTypeURL), false},
		{"other namespace", arcResource(t, wire.ArcName("x", good.Range), wire.Arc("x", good), ArcTypeURL), false},
		{"name mismatch", arcResource(t, wire.ArcName(ns, rg(0, q)), wire.Arc(ns, good), ArcTypeURL), false},
		{"owner without address", arcResource(t, name, &fugev1.Arc{Namespace: ns, Range: wire.Range(good.Range), Owner: "b", Gen: 2}, ArcTypeURL), false},
		{"no range", arcResource(t, name, &fugev1.Arc{Namespace: ns, Gen: 2}, ArcTypeURL), false},
		{"garbage", &discovery.Resource{Name: name, Resource: &anypb.Any{TypeUrl: ArcTypeURL, Value: []byte{0xff, 0xff}}}, false},
	}
	for _, tt := range tests {
		u, err := decodeArcs(ns, &discovery.DeltaDiscoveryResponse{TypeUrl: ArcTypeURL, Resources: []*discovery.Resource{tt.res}})
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrBadResource)) {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
			continue
		}
		if tt.ok && (len(u.set) != 1 || u.set[tt.res.Name].version != "v") {
			t.Errorf("%s: decoded %v", tt.name, u.set)
		}
	}
	dup := arcResource(t, name, wire.Arc(ns, good), ArcTypeURL)
	if _, err := decodeArcs(ns, &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{dup, dup}}); err == nil {
		t.Error("a resource sent twice decoded")
	}
	hb := arcResource(t, HeartbeatName(ns), &fugev1.Heartbeat{Namespace: ns, Seq: 1}, HeartbeatTypeURL)
	if err := checkHeartbeats(ns, &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{hb}}); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	hb = arcResource(t, HeartbeatName("x"), &fugev1.Heartbeat{Namespace: "x", Seq: 1}, HeartbeatTypeURL)
	if err := checkHeartbeats(ns, &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{hb}}); err == nil {
		t.Error("another namespace's heartbeat passed")
	}
}

// FuzzDecode decodes arbitrary responses: no panic, and what decodes is
// named after its range and routable.
func FuzzDecode(f *testing.F) {
	for _, e := range quarters {
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: ArcTypeURL, Nonce: "1", Resources: []*discovery.Resource{
			arcResource(f, wire.ArcName(ns, e.Range), wire.Arc(ns, e), ArcTypeURL),
		}, RemovedResources: []string{"ns/x"}}
		b, err := proto.Marshal(resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp discovery.DeltaDiscoveryResponse
		if proto.Unmarshal(b, &resp) != nil {
			return
		}
		_ = checkHeartbeats(ns, &resp)
		u, err := decodeArcs(ns, &resp)
		if err != nil {
			return
		}
		for name, h := range u.set {
			if name != wire.ArcName(ns, h.entry.Range) {
				t.Fatalf("arc %q holds %v", name, h.entry.Range)
			}
			if h.entry.Owner != "" && h.entry.Addr == "" {
				t.Fatalf("arc %q held without an address", name)
			}
		}
	})
}
