package xds

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// ServerOptions are the gRPC server options the lease table needs on the
// server it is registered on: its codec (see Codec). cmd/fuge-manager
// passes them in manager.ServerConfig.GRPCOptions.
func (t *LeaseTable) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(codec{base: encoding.GetCodecV2(proto.Name), frames: &t.frames})}
}

// frameIndex maps the delta resources the lease table serves to their
// frames (resource.framed), so that Codec sends a resource as one shared
// slice. A resource leaves it when its cache replaces or deletes it; a
// response still carrying it then has its envelope written fresh.
type frameIndex struct {
	m      sync.Map // *discovery.Resource -> []byte
	bodies sync.Map // **discovery.Resource (a response's Resources[0]) -> indexedBody
}

func (x *frameIndex) add(r *resource) {
	if x != nil && r != nil && r.framed != nil {
		x.m.Store(r.delta, r.framed)
	}
}

func (x *frameIndex) remove(r *resource) {
	if x != nil && r != nil && r.framed != nil {
		x.m.Delete(r.delta)
	}
}

// addBody indexes the encoding of rs as the resources of a delta response,
// the concatenation of their frames, so that Codec sends a response
// carrying exactly rs (the same slice: its first element's address and its
// length) as its head and this one shared slice (lookupAnswerFor). Nothing
// is indexed if a resource has no frame.
func (x *frameIndex) addBody(rs []*discovery.Resource) {
	if x == nil || len(rs) == 0 {
		return
	}
	frames := make([][]byte, len(rs))
	n := 0
	for i, r := range rs {
		if frames[i] = x.get(r); frames[i] == nil {
			return
		}
		n += len(frames[i])
	}
	body := make([]byte, 0, n)
	for _, f := range frames {
		body = append(body, f...)
	}
	x.bodies.Store(&rs[0], indexedBody{n: len(rs), b: body})
}

// removeBody forgets the encoding of rs; a response still carrying them is
// then sent resource by resource.
func (x *frameIndex) removeBody(rs []*discovery.Resource) {
	if x != nil && len(rs) > 0 {
		x.bodies.Delete(&rs[0])
	}
}

// body is the indexed encoding of rs, or nil.
func (x *frameIndex) body(rs []*discovery.Resource) []byte {
	if x == nil || len(rs) == 0 {
		return nil
	}
	if v, ok := x.bodies.Load(&rs[0]); ok && v.(indexedBody).n == len(rs) {
		return v.(indexedBody).b
	}
	return nil
}

type indexedBody struct {
	n int
	b []byte
}

func (x *frameIndex) get(d *discovery.Resource) []byte {
	if x == nil {
		return nil
	}
	if b, ok := x.m.Load(d); ok {
		return b.([]byte)
	}
	return nil
}

// Codec returns the gRPC codec that sends every resource's bytes from the
// one copy the lease table marshaled, whatever the number of streams.
//
// gRPC's proto codec marshals each response into a buffer of its own: a
// whole table (about 250 KB at ring size 4096) per lookup stream, which the
// transport keeps until the client's flow-control window lets it out. With
// 2,000 lookups starting at once that held 1 GB of copies of the same
// bytes (heap profile: 94% of the in-use heap under mem.sizedBufferPool.Get
// in the responses' encode). This codec writes a discovery response as
// the few bytes of its own fields and of each resource's envelope (name,
// version, type URL, lengths), fresh per response, followed by each Any's
// value as the shared read-only slice itself, in a mem.BufferSlice that
// gRPC writes out without copying it first. The bytes on the wire are a
// valid encoding of the same message (fields in another order than
// proto.Marshal's, which every parser accepts): a response is decoded as
// what proto.Marshal would have sent.
//
// Every other message, and a response with a field the codec does not
// write itself (an alias, a TTL, resource metadata), is marshaled by
// gRPC's proto codec; messages are unmarshaled by it.
func Codec() encoding.CodecV2 { return codec{base: encoding.GetCodecV2(proto.Name)} }

type codec struct {
	base   encoding.CodecV2
	frames *frameIndex // nil: every envelope is written fresh
}

// shareAbove is the least total size of the values that makes a response
// worth sending from shared slices: below it, one buffer is cheaper than
// the pieces.
const shareAbove = 4 << 10

func (c codec) Name() string { return proto.Name }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *discovery.DeltaDiscoveryResponse:
		if out, ok := marshalDelta(m, c.frames); ok {
			return out, nil
		}
	case *discovery.DiscoveryResponse:
		if out, ok := marshalSotW(m); ok {
			return out, nil
		}
	}
	return c.base.Marshal(v)
}

// marshalDelta writes a delta response as its own fields, then each
// resource as field 2: its name, version and Any envelope fresh, the Any's
// value shared. It declines (false) a response whose resources carry
// fields other than name, version and an Any, or are too small to share.
func marshalDelta(m *discovery.DeltaDiscoveryResponse, frames *frameIndex) (mem.BufferSlice, bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	// A response with an indexed body carries a cache's resources, which
	// are plain (their frames are the body): it is not looked through.
	body := frames.body(m.Resources)
	if body == nil {
		shared := 0
		for _, r := range m.Resources {
			if !plainResource(r) {
				return nil, false
			}
			shared += len(r.Resource.GetValue())
		}
		if shared < shareAbove {
			return nil, false
		}
	}
	head := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo:    m.SystemVersionInfo,
		TypeUrl:              m.TypeUrl,
		RemovedResources:     m.RemovedResources,
		RemovedResourceNames: m.RemovedResourceNames,
		Nonce:                m.Nonce,
		ControlPlane:         m.ControlPlane,
		ResourceErrors:       m.ResourceErrors,
	}
	b, err := gproto.Marshal(head)
	if err != nil {
		return nil, false
	}
	if body != nil {
		return mem.BufferSlice{mem.SliceBuffer(b), mem.SliceBuffer(body)}, true
	}
	// One fresh buffer holds the head and the envelopes of the resources
	// without a frame; the slice alternates pieces of it with the shared
	// frames and values. A stream's transport keeps what is returned here
	// until its flow-control window lets it all out, so it is kept small:
	// with frames, the head and a slice header per resource.
	fs := make([][]byte, len(m.Resources))
	size, pieces := len(b), 1
	for i, r := range m.Resources {
		if fs[i] = frames.get(r); fs[i] != nil {
			pieces++
		} else {
			size += deltaEnvelopeSize(r)
			pieces += 2
		}
	}
	buf := make([]byte, 0, size)
	buf = append(buf, b...)
	out := make(mem.BufferSlice, 0, pieces)
	from := 0
	for i, r := range m.Resources {
		if f := fs[i]; f != nil {
			if from < len(buf) {
				out = append(out, mem.SliceBuffer(buf[from:len(buf):len(buf)]))
				from = len(buf)
			}
			out = append(out, mem.SliceBuffer(f))
			continue
		}
		a := r.Resource
		anyLen := anyEnvelopeLen(a) + len(a.GetValue())
		resLen := stringField(3, r.Name) + stringField(1, r.Version)
		if a != nil {
			resLen += protowire.SizeTag(2) + protowire.SizeBytes(anyLen)
		}
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(resLen))
		buf = appendString(buf, 3, r.Name)
		buf = appendString(buf, 1, r.Version)
		if a == nil {
			continue
		}
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(anyLen))
		buf = appendAnyEnvelope(buf, a)
		if len(a.Value) > 0 {
			out = append(out, mem.SliceBuffer(buf[from:len(buf):len(buf)]), mem.SliceBuffer(a.Value))
			from = len(buf)
		}
	}
	if from < len(buf) {
		out = append(out, mem.SliceBuffer(buf[from:]))
	}
	return out, true
}

// marshalSotW writes a state-of-the-world response as its own fields, then
// each Any as field 2: its envelope fresh, its value shared.
func marshalSotW(m *discovery.DiscoveryResponse) (mem.BufferSlice, bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	shared := 0
	for _, a := range m.Resources {
		if !plainAny(a) {
			return nil, false
		}
		shared += len(a.Value)
	}
	if shared < shareAbove {
		return nil, false
	}
	head := &discovery.DiscoveryResponse{
		VersionInfo:    m.VersionInfo,
		Canary:         m.Canary,
		TypeUrl:        m.TypeUrl,
		Nonce:          m.Nonce,
		ControlPlane:   m.ControlPlane,
		ResourceErrors: m.ResourceErrors,
	}
	b, err := gproto.Marshal(head)
	if err != nil {
		return nil, false
	}
	size := len(b)
	for _, a := range m.Resources {
		size += protowire.SizeTag(2) + protowire.SizeVarint(uint64(anyEnvelopeLen(a)+len(a.Value))) + anyEnvelopeLen(a)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, b...)
	out := make(mem.BufferSlice, 0, 2*len(m.Resources)+1)
	from := 0
	for _, a := range m.Resources {
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(anyEnvelopeLen(a)+len(a.Value)))
		buf = appendAnyEnvelope(buf, a)
		if len(a.Value) > 0 {
			out = append(out, mem.SliceBuffer(buf[from:len(buf):len(buf)]), mem.SliceBuffer(a.Value))
			from = len(buf)
		}
	}
	if from < len(buf) {
		out = append(out, mem.SliceBuffer(buf[from:]))
	}
	return out, true
}

// plainResource reports whether a delta resource has only the fields the
// codec writes: name, version and a plain Any.
func plainResource(r *discovery.Resource) bool {
	return r != nil && r.ResourceName == nil && len(r.Aliases) == 0 && r.Ttl == nil &&
		r.CacheControl == nil && r.Metadata == nil && len(r.ProtoReflect().GetUnknown()) == 0 &&
		(r.Resource == nil || plainAny(r.Resource))
}

// plainAny reports whether an Any has only its type URL and value.
func plainAny(a *anypb.Any) bool {
	return a != nil && len(a.ProtoReflect().GetUnknown()) == 0
}

// deltaEnvelopeSize bounds what marshalDelta writes for a resource besides
// its Any's value.
func deltaEnvelopeSize(r *discovery.Resource) int {
	n := 2*(protowire.SizeTag(2)+protowire.SizeVarint(1<<63)) + stringField(3, r.Name) + stringField(1, r.Version)
	if r.Resource != nil {
		n += anyEnvelopeLen(r.Resource)
	}
	return n
}

// anyEnvelopeLen is the size of an Any's encoding without its value's
// bytes: the type URL field and the value's tag and length.
func anyEnvelopeLen(a *anypb.Any) int {
	n := stringField(1, a.GetTypeUrl())
	if v := a.GetValue(); len(v) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeVarint(uint64(len(v)))
	}
	return n
}

// appendAnyEnvelope appends an Any's type URL field and its value's tag
// and length; the value's bytes follow.
func appendAnyEnvelope(b []byte, a *anypb.Any) []byte {
	b = appendString(b, 1, a.TypeUrl)
	if len(a.Value) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(a.Value)))
	}
	return b
}

// stringField is the size of a proto3 string field (nothing when empty).
func stringField(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// anyTypeURL is the type URL anypb.New gives m.
func anyTypeURL(m gproto.Message) string {
	return "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
}

// appendDeltaEnvelope appends what marshalDelta writes before the value
// of d, whose Any's value will be size bytes: d as field 2 of a delta
// response, up to its value's length.
func appendDeltaEnvelope(b []byte, d *discovery.Resource, size int) []byte {
	a := d.Resource
	anyLen := stringField(1, a.TypeUrl)
	if size > 0 {
		anyLen += protowire.SizeTag(2) + protowire.SizeBytes(size)
	}
	resLen := stringField(3, d.Name) + stringField(1, d.Version) + protowire.SizeTag(2) + protowire.SizeBytes(anyLen)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(resLen))
	b = appendString(b, 3, d.Name)
	b = appendString(b, 1, d.Version)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anyLen))
	b = appendString(b, 1, a.TypeUrl)
	if size > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
	}
	return b
}
