package xds

import (
	"bytes"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// testAny is an Any whose value is n bytes.
func testAny(n int, fill byte) *anypb.Any {
	return &anypb.Any{TypeUrl: ArcBlockTypeURL, Value: bytes.Repeat([]byte{fill}, n)}
}

func TestCodecDeltaRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *discovery.DeltaDiscoveryResponse
	}{
		{"blocks", &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: "17", TypeUrl: ArcBlockTypeURL, Nonce: "3",
			RemovedResources: []string{"ns/block/9"},
			ControlPlane:     &corev3.ControlPlane{Identifier: "m1"},
			Resources: []*discovery.Resource{
				{Name: "ns/block/0", Version: "12", Resource: testAny(3000, 1)},
				{Name: "ns/block/1", Version: "17", Resource: testAny(200, 2)},
				{Name: "ns/block/2", Version: "", Resource: &anypb.Any{TypeUrl: ArcBlockTypeURL}},
				{Name: "ns/block/3", Version: "4"},
				{Name: "ns/block/4", Version: "17", Resource: testAny(70000, 3)},
			},
		}},
		{"one large", &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{{Resource: testAny(5000, 9)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, ok := marshalDelta(tc.m, nil)
			if !ok {
				t.Fatal("declined")
			}
			checkDecodes(t, data, tc.m, new(discovery.DeltaDiscoveryResponse))
			// The values are the resources' own bytes, not copies.
			shared := 0
			for _, b := range data {
				for _, r := range tc.m.Resources {
					if v := r.GetResource().GetValue(); len(v) > 0 && &b.ReadOnlyData()[0] == &v[0] {
						shared++
					}
				}
			}
			if want := countValues(tc.m); shared != want {
				t.Errorf("%d values sent from the shared bytes, want %d", shared, want)
			}
		})
	}
}

// TestCodecFrames checks responses of resources made by newResource, whose
// frames the codec sends whole: the bytes decode to the response, and a
// resource no longer indexed is written as any other.
func TestCodecFrames(t *testing.T) {
	var idx frameIndex
	var rs []*resource
	for b := range uint32(6) {
		var es []lease.Entry
		for i := range 40 * b {
			end := uint64(b)<<58 | uint64(i+1)<<20
			es = append(es, lease.Entry{Range: ring.Range{Start: end - 1<<20, End: end}, Owner: fmt.Sprint("owner-", i), Addr: "a:1", Gen: 7})
		}
		r, err := newResource(wire.BlockName("ns", b), fmt.Sprint(b+10), wire.ArcBlock("ns", testBits, b, es))
		if err != nil {
			t.Fatal(err)
		}
		if r.framed == nil {
			t.Errorf("block %d (%d bytes) not framed", b, proto.Size(wire.ArcBlock("ns", testBits, b, es)))
		}
		idx.add(r)
		rs = append(rs, r)
	}
	idx.remove(rs[5])
	m := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "15", TypeUrl: ArcBlockTypeURL, Nonce: "1"}
	for _, r := range rs {
		m.Resources = append(m.Resources, r.delta)
	}
	data, ok := marshalDelta(m, &idx)
	if !ok {
		t.Fatal("declined")
	}
	checkDecodes(t, data, m, new(discovery.DeltaDiscoveryResponse))
	whole := 0
	for _, b := range data {
		for _, r := range rs[:5] {
			if r.framed != nil && len(b.ReadOnlyData()) == len(r.framed) && &b.ReadOnlyData()[0] == &r.framed[0] {
				whole++
			}
		}
	}
	if want := 5; whole != want { // blocks 0 to 4 are framed and indexed
		t.Errorf("%d resources sent as their frames, want %d", whole, want)
	}
}

func countValues(m *discovery.DeltaDiscoveryResponse) int {
	n := 0
	for _, r := range m.Resources {
		if len(r.GetResource().GetValue()) > 0 {
			n++
		}
	}
	return n
}

func TestCodecSotWRoundTrip(t *testing.T) {
	m := &discovery.DiscoveryResponse{
		VersionInfo: "17", TypeUrl: ArcBlockTypeURL, Nonce: "5", Canary: true,
		Resources: []*anypb.Any{testAny(4000, 1), {TypeUrl: ArcBlockTypeURL}, testAny(129, 2), testAny(20000, 3)},
	}
	data, ok := marshalSotW(m)
	if !ok {
		t.Fatal("declined")
	}
	checkDecodes(t, data, m, new(discovery.DiscoveryResponse))
}

// checkDecodes checks that data decodes to want, and that its bytes are
// what proto.Marshal writes up to the order of fields.
func checkDecodes(t *testing.T, data mem.BufferSlice, want, into proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(data.Materialize(), into); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(into, want) {
		t.Fatalf("decoded\n%v\nwant\n%v", into, want)
	}
	if n := proto.Size(want); data.Len() != n {
		t.Errorf("%d bytes, proto.Marshal writes %d", data.Len(), n)
	}
}

// TestCodecDeclines checks that what the codec does not write itself goes
// to gRPC's proto codec, unchanged.
func TestCodecDeclines(t *testing.T) {
	big := func(r *discovery.Resource) *discovery.DeltaDiscoveryResponse {
		return &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{r}}
	}
	for name, m := range map[string]proto.Message{
		"small":      big(&discovery.Resource{Name: "a", Resource: testAny(100, 1)}),
		"aliases":    big(&discovery.Resource{Name: "a", Aliases: []string{"b"}, Resource: testAny(5000, 1)}),
		"ttl":        big(&discovery.Resource{Name: "a", Ttl: durationpb.New(1), Resource: testAny(5000, 1)}),
		"sotw small": &discovery.DiscoveryResponse{Resources: []*anypb.Any{testAny(100, 1)}},
		"request":    &discovery.DeltaDiscoveryRequest{TypeUrl: ArcBlockTypeURL},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := Codec().Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := encoding.GetCodecV2(grpcproto.Name).Marshal(m)
			if !bytes.Equal(data.Materialize(), want.Materialize()) {
				t.Error("not gRPC's proto codec's bytes")
			}
		})
	}
}

// TestCodecKnowsEveryField fails when a new go-control-plane adds a field
// to the messages the codec writes: the codec copies fields one by one,
// and would drop the new one.
func TestCodecKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		m     proto.Message
		known string
	}{
		{&discovery.DeltaDiscoveryResponse{}, "[system_version_info resources type_url removed_resources removed_resource_names nonce control_plane resource_errors]"},
		{&discovery.DiscoveryResponse{}, "[version_info resources canary type_url nonce control_plane resource_errors]"},
		{&discovery.Resource{}, "[name resource_name aliases version resource ttl cache_control metadata]"},
		{&anypb.Any{}, "[type_url value]"},
	} {
		fs := tc.m.ProtoReflect().Descriptor().Fields()
		var names []protoreflect.Name
		for i := range fs.Len() {
			names = append(names, fs.Get(i).Name())
		}
		if got := fmt.Sprint(names); got != tc.known {
			t.Errorf("%T has fields %s, the codec knows %s", tc.m, got, tc.known)
		}
	}
}

// BenchmarkCodec measures a response of a whole table (64 blocks of 4 KB)
// marshaled for one stream: with the shared values, and with gRPC's
// proto codec.
func BenchmarkCodec(b *testing.B) {
	m := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "17", TypeUrl: ArcBlockTypeURL, Nonce: "3"}
	for i := range 64 {
		m.Resources = append(m.Resources, &discovery.Resource{Name: fmt.Sprintf("ns/block/%d", i), Version: "17", Resource: testAny(4000, byte(i))})
	}
	// The same blocks as the lease table publishes them: framed.
	var idx frameIndex
	framed := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "17", TypeUrl: ArcBlockTypeURL, Nonce: "3"}
	for i := range 64 {
		r, err := newResource(fmt.Sprintf("ns/block/%d", i), "17", &anypb.Any{Value: bytes.Repeat([]byte{byte(i)}, 4000)})
		if err != nil {
			b.Fatal(err)
		}
		idx.add(r)
		framed.Resources = append(framed.Resources, r.delta)
	}
	b.Run("framed", func(b *testing.B) {
		c := codec{base: encoding.GetCodecV2(grpcproto.Name), frames: &idx}
		b.ReportAllocs()
		for b.Loop() {
			data, err := c.Marshal(framed)
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
	for name, c := range map[string]encoding.CodecV2{"shared": Codec(), "proto": encoding.GetCodecV2(grpcproto.Name)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
