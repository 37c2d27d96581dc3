package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ring"
)

// lightLookup stands in for an lb.Lookup in scale runs: a real delta ADS
// stream to a manager node, marked as a Lookup's (wire.ClientKindKey), with
// a Lookup's two wildcard subscriptions, which acknowledges every response
// once it has taken it in, sends the versions it holds when it reconnects,
// follows a standby's "fuge-leader" trailer and otherwise tries the next
// manager. What it keeps of the table is each block's version (an LSN),
// not its arcs: a response is parsed for its blocks' names and versions
// only (lightCodec). 20,000 lb.Lookups at R = 65536 would hold 20,000
// decoded tables of 3.7 MB; a light one holds 16 KB. The manager cannot
// tell the two apart: it serves, pushes and counts the same stream.
type lightLookup struct {
	name     string
	managers []string
	conns    *lb.ConnPool                // nil: a connection of its own, dialled with dial
	dial     []grpc.DialOption           // for a connection of its own
	watch    *atomic.Pointer[pointWatch] // the pool's watched point (see pool.watchPoint), nil for none
	cancel   context.CancelFunc          // ends run
	done     chan struct{}               // closed when run returns

	// Read and written by run only, but for ready.
	bits     uint32
	versions []uint32 // by block number: the version held, 0 for none
	held     int      // blocks with a version
	ready    chan struct{}
	isReady  bool

	updates, heartbeats, reconnects atomic.Uint64
	// seen is when a response arrived carrying the arc that holds the
	// watched point as the watch wants it (unix nanoseconds, by the
	// generator's clock), 0 until one has.
	seen atomic.Int64
}

// startLight starts a light lookup; Close ends it.
func startLight(name string, managers []string, conns *lb.ConnPool, dial []grpc.DialOption, watch *atomic.Pointer[pointWatch]) *lightLookup {
	ctx, cancel := context.WithCancel(context.Background())
	l := &lightLookup{name: name, managers: managers, conns: conns, dial: dial, watch: watch,
		cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	go l.run(ctx)
	return l
}

// Ready is closed once the lookup holds every block of the table.
func (l *lightLookup) Ready() <-chan struct{} { return l.ready }

// Close ends the stream and waits for it.
func (l *lightLookup) Close() {
	l.cancel()
	<-l.done
}

func (l *lightLookup) run(ctx context.Context) {
	defer close(l.done)
	i := rand.IntN(len(l.managers))
	addr := l.managers[i]
	backoff := 50 * time.Millisecond
	redirects := 0 // named addresses followed since a response last arrived
	for {
		named, got := l.stream(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		l.reconnects.Add(1)
		if got {
			backoff, redirects = 50*time.Millisecond, 0
		}
		// A standby names the leader, the leader a standby: follow it at
		// once, as lb.Lookup does, unless it sends us back and forth.
		if named != "" && redirects < len(l.managers) {
			addr = named
			redirects++
			continue
		}
		if !got { // a node that served us is retried first
			i = (i + 1) % len(l.managers)
			addr = l.managers[i]
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(float64(backoff) * (0.5 + rand.Float64()))):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// adsStream is the method a Lookup's stream calls.
var adsStream = grpc.StreamDesc{StreamName: "DeltaAggregatedResources", ServerStreams: true, ClientStreams: true}

const adsMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

// stream runs one stream to addr until it ends; got reports whether a
// response arrived, named is the node its trailer names: the leader
// ("fuge-leader", from a standby out of contact) or a standby
// ("fuge-standby", from the leader, which leaves Lookups to them).
func (l *lightLookup) stream(ctx context.Context, addr string) (named string, got bool) {
	named, got, err := l.streamErr(ctx, addr)
	if err != nil && ctx.Err() == nil && named == "" && l.reconnects.Load() < 3 {
		log.Printf("%s: stream to %s ended: %v", l.name, addr, err)
	}
	return named, got
}

func (l *lightLookup) streamErr(ctx context.Context, addr string) (named string, got bool, err error) {
	var cc *grpc.ClientConn
	if l.conns != nil {
		var release func()
		if cc, release, err = l.conns.Conn(addr); err != nil {
			return "", false, err
		}
		defer release()
	} else {
		if cc, err = grpc.NewClient(addr, l.dial...); err != nil {
			return "", false, err
		}
		defer cc.Close()
	}
	sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, wire.ClientKindKey, wire.ClientLookup))
	defer cancel()
	st, err := cc.NewStream(sctx, &adsStream, adsMethod, grpc.ForceCodecV2(lightCodec{}))
	if err != nil {
		return "", false, err
	}
	node := lightNode(l.name)
	var versions map[string]string
	for b, v := range l.versions {
		if v != 0 {
			if versions == nil {
				versions = make(map[string]string, l.held)
			}
			versions[wire.BlockName(namespace, uint32(b))] = strconv.FormatUint(uint64(v), 10)
		}
	}
	for _, req := range []*discovery.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: lb.ArcBlockTypeURL, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: versions},
		{Node: node, TypeUrl: lb.HeartbeatTypeURL, ResourceNamesSubscribe: []string{"*"}},
	} {
		if err := st.SendMsg(req); err != nil {
			return "", false, err
		}
	}
	var r lightResp
	for {
		r.watch = l.watch
		if err := st.RecvMsg(&r); err != nil {
			tr := st.Trailer()
			for _, key := range []string{lb.LeaderTrailer, lb.StandbyTrailer} {
				if v := tr.Get(key); len(v) > 0 {
					named = v[0]
				}
			}
			return named, got, err
		}
		got = true
		ack := &discovery.DeltaDiscoveryRequest{TypeUrl: r.typeURL, ResponseNonce: r.nonce}
		switch r.typeURL {
		case lb.ArcBlockTypeURL:
			if err := l.apply(&r); err != nil {
				return "", got, err
			}
			l.updates.Add(1)
		case lb.HeartbeatTypeURL:
			l.heartbeats.Add(1)
		}
		if err := st.SendMsg(ack); err != nil {
			return "", got, err
		}
	}
}

// apply takes in an ArcBlock response: the versions of the blocks sent,
// and the table's size from their bit count.
func (l *lightLookup) apply(r *lightResp) error {
	if len(r.blocks) > 0 && r.bits != l.bits {
		if err := wire.ValidBlock(r.bits, 0); err != nil {
			return err
		}
		l.bits, l.versions, l.held = r.bits, make([]uint32, 1<<r.bits), 0
	}
	if r.hit && l.seen.Load() == 0 {
		l.seen.Store(time.Now().UnixNano())
	}
	for _, b := range r.blocks {
		if b.num >= uint32(len(l.versions)) {
			return fmt.Errorf("block %d of %d", b.num, len(l.versions))
		}
		if l.versions[b.num] == 0 {
			l.held++
		}
		l.versions[b.num] = uint32(max(b.version, 1))
	}
	for _, b := range r.removed {
		if b < uint32(len(l.versions)) && l.versions[b] != 0 {
			l.versions[b] = 0
			l.held--
		}
	}
	if !l.isReady && l.versions != nil && l.held == len(l.versions) {
		l.isReady = true
		close(l.ready)
	}
	return nil
}

// lightNode names the lookup and its namespace (node.cluster, which the
// manager reads when the metadata does not name one).
func lightNode(name string) *corev3.Node {
	return &corev3.Node{Id: name, Cluster: namespace, UserAgentName: "managerscale-light"}
}

// lightResp is what a light lookup keeps of a response.
type lightResp struct {
	typeURL, nonce string
	blocks         []lightBlock // reused from response to response
	removed        []uint32
	bits           uint32 // the first block's bit count
	// watch, loaded as the response is read, asks whether it carries
	// the arc holding a point at an address (or not at it): hit.
	watch *atomic.Pointer[pointWatch]
	hit   bool
	// scratch holds a field that straddled two of a response's buffers.
	scratch []byte
}

// pointWatch is a change to time: the arc holding point h has the address
// addr (at), or another one (!at). The arc holding h ends at h or after
// it, in a block that a change of it re-sends, which need not be h's
// block: so the blocks' arcs are read, not only their names.
type pointWatch struct {
	h    uint64
	addr string
	at   bool
}

// nearBlocks bounds how far after the point's block the arc holding it may
// end: the arc is one owner's run of ring entries, and 64 blocks are about
// 256 entries. Reading every block's arcs cost the load generator a
// quarter of its CPU while it timed a change at R=65536.
const nearBlocks = 64

// near reports whether block b of 2^bits may hold the arc containing w.h.
func (w *pointWatch) near(b, bits uint32) bool {
	if bits == 0 || bits > 32 {
		return true
	}
	d := (b - wire.BlockOf(w.h, bits)) & (1<<bits - 1)
	return d <= nearBlocks
}

// seenIn reports whether an encoded ArcBlock holds the arc containing w.h
// with the address w wants.
func (w *pointWatch) seenIn(block []byte) bool {
	hit := false
	_ = eachField(block, func(num protowire.Number, arc []byte) error {
		if num != 3 { // arcs
			return nil
		}
		var start, end uint64
		var addr string
		_ = eachField(arc, func(num protowire.Number, f []byte) error {
			switch num {
			case 2: // range: start 1, end 2, fixed64
				for len(f) > 0 {
					n, typ, k := protowire.ConsumeTag(f)
					if k < 0 || typ != protowire.Fixed64Type {
						return nil
					}
					v, m := protowire.ConsumeFixed64(f[k:])
					if m < 0 {
						return nil
					}
					if n == 1 {
						start = v
					} else if n == 2 {
						end = v
					}
					f = f[k+m:]
				}
			case 4:
				addr = string(f)
			}
			return nil
		})
		if (ring.Range{Start: start, End: end}).Contains(w.h) && (addr == w.addr) == w.at {
			hit = true
		}
		return nil
	})
	return hit
}

type lightBlock struct {
	num     uint32
	version uint64
}

// lightCodec marshals requests as protobuf and parses responses into
// lightResp without building the messages. It is a gRPC CodecV2, handed
// the response as the buffers it arrived in: a whole table at R = 4096 is
// about 300 KB in 16 KB buffers, and copying it into one slice first (what
// gRPC does for a CodecV0) cost the generator a fifth of its CPU while
// 2,000 lookups started. Fields are read where they lie; only one that
// straddles two buffers is copied (into lightResp.scratch).
type lightCodec struct{}

func (lightCodec) Name() string { return "proto" }

func (lightCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("lightCodec: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

var blockPrefix = []byte(namespace + "/block/")

// Unmarshal parses a DeltaDiscoveryResponse: type_url (4), nonce (5),
// resources (2: name 3, version 1, resource 2 whose Any value 2 is an
// ArcBlock with block_bits 10) and removed_resources (6).
func (lightCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*lightResp)
	if !ok {
		return fmt.Errorf("lightCodec: cannot unmarshal into %T", v)
	}
	r.typeURL, r.nonce, r.blocks, r.removed, r.bits, r.hit = "", "", r.blocks[:0], r.removed[:0], 0, false
	var w *pointWatch
	if r.watch != nil {
		w = r.watch.Load()
	}
	c := bufCursor{bufs: data}
	return c.fields(&r.scratch, func(num protowire.Number, b []byte) error { return r.field(num, b, w) })
}

// field reads one length-delimited field of a response.
func (r *lightResp) field(num protowire.Number, b []byte, w *pointWatch) error {
	switch num {
	case 4:
		r.typeURL = string(b)
	case 5:
		r.nonce = string(b)
	case 6:
		if n, ok := blockNum(b); ok {
			r.removed = append(r.removed, n)
		}
	case 2:
		var blk lightBlock
		var name, value []byte
		err := eachField(b, func(num protowire.Number, f []byte) error {
			switch num {
			case 3:
				name = f
			case 1:
				blk.version, _ = parseDecimal(f)
			case 2:
				return eachField(f, func(num protowire.Number, g []byte) error {
					if num == 2 {
						value = g
					}
					return nil
				})
			}
			return nil
		})
		if err != nil {
			return err
		}
		n, ok := blockNum(name)
		if !ok {
			return nil
		}
		blk.num = n
		if len(r.blocks) == 0 {
			r.bits = blockBitsOf(value)
			// A whole table is 2^bits blocks: growing to it by appends
			// cost a twentieth of the generator's start-up CPU.
			if want := 1 << min(r.bits, wire.MaxBlockBits); cap(r.blocks) < want {
				r.blocks = make([]lightBlock, 0, want)
			}
		}
		if w != nil && !r.hit && w.near(n, r.bits) {
			r.hit = w.seenIn(value)
		}
		r.blocks = append(r.blocks, blk)
	}
	return nil
}

// bufCursor reads a message that lies in a sequence of buffers.
type bufCursor struct {
	bufs mem.BufferSlice
	i    int    // the buffer being read
	cur  []byte // what is left of it
}

// done reports whether every buffer has been read.
func (c *bufCursor) done() bool {
	for len(c.cur) == 0 {
		if c.i == len(c.bufs) {
			return true
		}
		c.cur = c.bufs[c.i].ReadOnlyData()
		c.i++
	}
	return false
}

// fields calls f with the length-delimited fields of the message left,
// by number, and skips the others. A field that straddles two buffers is
// passed in *scratch (scratch may be nil when there is one buffer).
func (c *bufCursor) fields(scratch *[]byte, f func(protowire.Number, []byte) error) error {
	for !c.done() {
		tag, err := c.varint()
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return fmt.Errorf("lightCodec: field number %d", num)
		}
		switch typ {
		case protowire.BytesType:
			n, err := c.varint()
			if err != nil {
				return err
			}
			b, err := c.take(n, scratch)
			if err != nil {
				return err
			}
			if err := f(num, b); err != nil {
				return err
			}
		case protowire.VarintType:
			if _, err := c.varint(); err != nil {
				return err
			}
		case protowire.Fixed32Type:
			if _, err := c.take(4, scratch); err != nil {
				return err
			}
		case protowire.Fixed64Type:
			if _, err := c.take(8, scratch); err != nil {
				return err
			}
		default:
			return fmt.Errorf("lightCodec: field %d of wire type %d", num, typ)
		}
	}
	return nil
}

var errTruncated = errors.New("lightCodec: truncated message")

// varint reads a varint, which may straddle buffers.
func (c *bufCursor) varint() (uint64, error) {
	if v, n := protowire.ConsumeVarint(c.cur); n > 0 {
		c.cur = c.cur[n:]
		return v, nil
	}
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if c.done() {
			return 0, errTruncated
		}
		b := c.cur[0]
		c.cur = c.cur[1:]
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, protowire.ParseError(-2)
}

// take returns the next n bytes: within the current buffer if they lie
// in it, else copied into *scratch, which the result may alias until the
// next take.
func (c *bufCursor) take(n uint64, scratch *[]byte) ([]byte, error) {
	if n <= uint64(len(c.cur)) {
		b := c.cur[:n]
		c.cur = c.cur[n:]
		return b, nil
	}
	if n > uint64(c.bufs.Len()) {
		return nil, errTruncated
	}
	out := (*scratch)[:0]
	for uint64(len(out)) < n {
		if c.done() {
			return nil, errTruncated
		}
		k := min(uint64(len(c.cur)), n-uint64(len(out)))
		out = append(out, c.cur[:k]...)
		c.cur = c.cur[k:]
	}
	*scratch = out
	return out, nil
}

// parseDecimal reads an unsigned decimal number without allocating.
func parseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		v = v*10 + uint64(d-'0')
	}
	return v, true
}

// eachField calls f with the length-delimited fields of a message, by
// number, and skips the others.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	c := bufCursor{cur: b}
	return c.fields(nil, f)
}

// blockNum is the number in a block's name, false for another name.
func blockNum(name []byte) (uint32, bool) {
	rest, ok := bytes.CutPrefix(name, blockPrefix)
	if !ok {
		return 0, false
	}
	n, ok := parseDecimal(rest)
	return uint32(n), ok && n <= math.MaxUint32
}

// blockBitsOf is an encoded ArcBlock's block_bits (field 10), 0 if none.
func blockBitsOf(b []byte) uint32 {
	var bits uint32
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == 10 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0
			}
			bits, b = uint32(v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0
		}
		b = b[n:]
	}
	return bits
}

// stats are a light lookup's counters.
func (l *lightLookup) stats() (updates, heartbeats, reconnects uint64) {
	return l.updates.Load(), l.heartbeats.Load(), l.reconnects.Load()
}
