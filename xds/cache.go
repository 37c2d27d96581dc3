package xds

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fuge-project/fuge/api/wire"
)

// resource is one published resource at one version, marshaled once into
// an Any when it is published and shared read-only by every response of
// every stream that carries it: a stream holds pointers to it until its
// response is sent, never a copy of its bytes. gRPC encodes the response
// for each send into a buffer it frees once written.
type resource struct {
	version string
	any     *anypb.Any
	delta   *discovery.Resource
	// explicit marks a resource sent only to subscriptions that name it,
	// never to wildcard ones (gRPC's API listener, which Envoy, which
	// subscribes to every Listener, would refuse).
	explicit bool
	// framed is delta's whole encoding as a field of a delta response (tag
	// and length included), for Codec; any.Value is its tail, not a copy.
	// Nil only if the message marshaled to another size than it measured.
	framed []byte
}

func newResource(name, version string, m proto.Message) (*resource, error) {
	// The frame first, then the value marshaled after it in the same
	// array: one copy of the bytes serves the Any and the frame. Every
	// resource is framed, however small: a Lookup's first answer at
	// R = 65536 is 16,384 blocks of about 250 bytes, and an envelope
	// written fresh for each of them, per stream, cost more than the
	// blocks' bytes.
	size := proto.Size(m)
	a := &anypb.Any{TypeUrl: anyTypeURL(m)}
	d := &discovery.Resource{Name: name, Version: version, Resource: a}
	head := appendDeltaEnvelope(nil, d, size)
	buf, err := proto.MarshalOptions{}.MarshalAppend(slices.Grow(head, size), m)
	if err != nil {
		return nil, fmt.Errorf("xds: packing %s: %w", name, err)
	}
	a.Value = buf[len(head):len(buf):len(buf)]
	r := &resource{version: version, any: a, delta: d}
	if len(a.Value) == size {
		r.framed = buf
	}
	return r, nil
}

// wireSize is the bytes r takes in a delta response: exact for a framed
// resource, within a few bytes for the others.
func (r *resource) wireSize() int {
	if r.framed != nil {
		return len(r.framed)
	}
	return proto.Size(r.delta) + 8
}

// inScope reports whether a subscription covers the resource r named name.
func inScope(sub cache.Subscription, name string, r *resource) bool {
	if _, ok := sub.SubscribedResources()[name]; ok {
		return true
	}
	return sub.IsWildcard() && !r.explicit
}

// typeCache holds the resources of one type in one namespace. It is
// go-control-plane's LinearCache with two differences that the lease table
// needs: each resource carries the version its publisher chose (a block's
// LSN), where LinearCache versions delta resources by a hash of their
// bytes; and state-of-the-world responses always carry every resource in the
// subscription's scope, so that a SotW client sees removals, where
// LinearCache sends only the changed resources of types other than
// Listener and Cluster.
//
// Each watch is answered at most once and then forgotten, as in every
// go-control-plane cache; the server opens the next one when the client
// acknowledges. Responses are sent while holding mu; the server's channels
// have room for them (one per SotW watch, two per type on a delta stream).
type typeCache struct {
	typeURL string

	mu sync.Mutex
	// version is the version_info of SotW responses: the last update's,
	// never empty (an empty version_info means "nothing accepted yet").
	version string
	// published is set by the first update: from then on a SotW
	// subscription by name to a type whose every response is the whole
	// state (Listeners and Clusters) is answered at once, so that a client
	// asking for a name that does not exist learns so.
	published bool
	fullState bool
	res       map[string]*resource
	frames    *frameIndex       // where Codec finds the frames of the resources in res
	wildcard  map[string]string // wildcardVersions, nil until needed after an update
	// lastWildcard is the newest map wildcardVersions built, of epoch
	// lastWildcardEpoch: the next one is its copy with the names updated
	// since set, not a walk of every resource.
	lastWildcard      map[string]string
	lastWildcardEpoch uint64
	// answers are this epoch's answers to Lookup streams, by the epoch
	// whose wildcard versions the streams hold (0: a stream that holds
	// nothing); nil after an update. See lookupAnswerFor.
	answers map[uint64]*lookupAnswer
	// epoch counts updates; recent holds the names each of the last
	// updates set or deleted, oldest first, so that a Lookup stream that
	// holds the wildcard versions of a recent epoch is answered from what
	// changed since (lookupChanges), not by comparing every resource: at
	// R = 65536 a namespace has 16,384 blocks, and a push goes to thousands
	// of streams.
	epoch   uint64
	recent  []cacheUpdate
	clock   clock
	watches map[uint64]watch
	nextID  uint64
}

// watch is an open SotW or delta watch.
type watch interface {
	// answer sends a response if the subscription is out of date or force
	// is set, and reports whether it did. It is called with c.mu held.
	answer(c *typeCache, force bool) bool
}

func newTypeCache(typeURL string, frames *frameIndex, clk clock) *typeCache {
	return &typeCache{
		typeURL:   typeURL,
		clock:     clk,
		frames:    frames,
		version:   "0",
		res:       map[string]*resource{},
		watches:   map[uint64]watch{},
		fullState: typeURL == ListenerTypeURL || typeURL == ClusterTypeURL,
	}
}

var _ cache.Cache = (*typeCache)(nil)

// update sets and deletes resources and answers the watches that are now
// out of date.
func (c *typeCache) update(version string, set map[string]*resource, del []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updateLocked(version, set, del)
}

// clear deletes every resource.
func (c *typeCache) clear(version string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updateLocked(version, nil, slices.Collect(maps.Keys(c.res)))
}

// cacheUpdate is what one update of a typeCache changed.
type cacheUpdate struct {
	epoch uint64
	names []string // set or deleted
}

// recentUpdates bounds typeCache.recent: a Lookup stream further behind
// (one that has not acknowledged for that many updates) is compared in
// full.
const recentUpdates = 64

func (c *typeCache) updateLocked(version string, set map[string]*resource, del []string) {
	c.version = version
	c.published = true
	c.wildcard = nil
	for _, a := range c.answers {
		a.forget(c.frames)
	}
	c.answers = nil
	c.epoch++
	names := make([]string, 0, len(set)+len(del))
	for name := range set {
		names = append(names, name)
	}
	names = append(names, del...)
	if len(c.recent) == recentUpdates {
		copy(c.recent, c.recent[1:])
		c.recent = c.recent[:recentUpdates-1]
	}
	c.recent = append(c.recent, cacheUpdate{epoch: c.epoch, names: names})
	for name, r := range set {
		c.frames.remove(c.res[name])
		c.frames.add(r)
		c.res[name] = r
	}
	for _, name := range del {
		c.frames.remove(c.res[name])
		delete(c.res, name)
	}
	for id, w := range c.watches {
		if w.answer(c, false) {
			delete(c.watches, id)
		}
	}
}

// changes compares what a subscription knows with the cache: the resources
// it lacks or knows at another version, and those it knows that are gone or
// no longer subscribed. Both are sorted.
func (c *typeCache) changes(sub cache.Subscription) (changed, removed []string) {
	known := sub.ReturnedResources()
	for name, r := range c.res {
		if v, ok := known[name]; inScope(sub, name, r) && (!ok || v != r.version) {
			changed = append(changed, name)
		}
	}
	for name := range known {
		if r, ok := c.res[name]; !ok || !inScope(sub, name, r) {
			removed = append(removed, name)
		}
	}
	slices.Sort(changed)
	slices.Sort(removed)
	return changed, removed
}

// lookupChanges is changes for a Lookup stream's subscription. One that
// holds the wildcard versions of a recent epoch is compared only on the
// names updated since; any other in full.
func (c *typeCache) lookupChanges(sub *lookupSub) (changed, removed []string) {
	if sub.epoch == 0 || len(c.recent) == 0 || sub.epoch+1 < c.recent[0].epoch || sub.epoch > c.epoch {
		return c.changes(sub)
	}
	for _, u := range c.recent {
		if u.epoch <= sub.epoch {
			continue
		}
		// A name updated more than once is classified the same each time
		// (by what is held now), so duplicates are dropped after sorting.
		for _, name := range u.names {
			v, held := sub.returned[name]
			switch r, in := c.res[name]; {
			case in && inScope(sub, name, r):
				if !held || v != r.version {
					changed = append(changed, name)
				}
			case held:
				removed = append(removed, name)
			}
		}
	}
	slices.Sort(changed)
	slices.Sort(removed)
	return slices.Compact(changed), slices.Compact(removed)
}

// scope lists the resources a subscription covers, sorted.
func (c *typeCache) scope(sub cache.Subscription) []string {
	var out []string
	for name, r := range c.res {
		if inScope(sub, name, r) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// sotwResponse is the whole state in a subscription's scope.
func (c *typeCache) sotwResponse(req *cache.Request, sub cache.Subscription) *sotwResponse {
	names := c.scope(sub)
	out := &sotwResponse{
		req:      req,
		resp:     &discovery.DiscoveryResponse{VersionInfo: c.version, TypeUrl: c.typeURL, Resources: make([]*anypb.Any, len(names))},
		returned: make(map[string]string, len(names)),
	}
	for i, name := range names {
		r := c.res[name]
		out.resp.Resources[i] = r.any
		out.returned[name] = r.version
	}
	return out
}

func (c *typeCache) track(w watch) func() {
	c.nextID++
	id := c.nextID
	c.watches[id] = w
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.watches, id)
	}
}

// CreateWatch opens a state-of-the-world watch. A request answers at once
// when the state in its scope differs from what the stream last received;
// acknowledgements and NACKs are otherwise answered when it changes, so a
// NACK does not bring the same state straight back. The first request for
// the type on a stream (no response nonce) is answered at once, even when
// its scope is empty, if it is a wildcard subscription, or names resources
// of a full-state type (Listener, Cluster) that has been published; a
// request by name for resources that do not exist otherwise waits for
// them, as xDS asks of Routes and Endpoints.
func (c *typeCache) CreateWatch(req *cache.Request, sub cache.Subscription, out chan cache.Response) (func(), error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("%w: %q in a cache of %q", ErrUnknownType, req.GetTypeUrl(), c.typeURL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := sotwWatch{req: req, sub: sub, out: out}
	first := req.GetResponseNonce() == ""
	if w.answer(c, first && (sub.IsWildcard() || c.fullState && c.published)) {
		return nil, nil
	}
	return c.track(w), nil
}

// CreateDeltaWatch opens a delta watch. The first request of a wildcard
// subscription is answered at once, even with nothing to send, so that the
// client knows its initial_resource_versions were taken into account.
func (c *typeCache) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, out chan cache.DeltaResponse) (func(), error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("%w: %q in a cache of %q", ErrUnknownType, req.GetTypeUrl(), c.typeURL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := deltaWatch{req: req, sub: sub, out: out}
	if w.answer(c, sub.IsWildcard() && req.GetResponseNonce() == "") {
		return nil, nil
	}
	return c.track(w), nil
}

// Fetch answers a REST poll with the whole state in the request's scope.
func (c *typeCache) Fetch(_ context.Context, req *cache.Request) (cache.Response, error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("%w: %q in a cache of %q", ErrUnknownType, req.GetTypeUrl(), c.typeURL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.GetVersionInfo() != "" && req.GetVersionInfo() == c.version {
		return nil, types.SkipFetchError{}
	}
	return c.sotwResponse(req, stream.NewSotwSubscription(req.GetResourceNames(), true)), nil
}

type sotwWatch struct {
	req *cache.Request
	sub cache.Subscription
	out chan cache.Response
}

func (w sotwWatch) answer(c *typeCache, force bool) bool {
	if changed, removed := c.changes(w.sub); !force && len(changed) == 0 && len(removed) == 0 {
		return false
	}
	w.out <- c.sotwResponse(w.req, w.sub)
	return true
}

type deltaWatch struct {
	req *cache.DeltaRequest
	sub cache.Subscription
	out chan cache.DeltaResponse
	// A Lookup stream's watch (serveLookup) hands its response to deliver
	// instead of out, and sets lookup's versions.
	lookup  *lookupSub
	deliver func(*deltaResponse)
	// atLeast holds the answer until the cache's version (an ArcBlock
	// cache's: the LSN of the view published last) is at least this: a
	// Lookup that moves from another node must not be sent an older
	// table than the one it holds. Zero holds nothing.
	atLeast uint64
	// first marks the first request of a subscription, answered even with
	// nothing to send once it is no longer held.
	first bool
}

// createLookupWatch opens a watch for a Lookup stream: as
// CreateDeltaWatch, the first request answered at once, but the response
// goes to deliver, and the versions the stream then holds are the cache's
// shared map (wildcardVersions).
func (c *typeCache) createLookupWatch(req *cache.DeltaRequest, sub *lookupSub, deliver func(*deltaResponse), atLeast uint64) (func(), error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("%w: %q in a cache of %q", ErrUnknownType, req.GetTypeUrl(), c.typeURL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	force := req.GetResponseNonce() == ""
	w := deltaWatch{req: req, sub: sub, lookup: sub, deliver: deliver, atLeast: atLeast, first: force}
	if w.answer(c, force) {
		return nil, nil
	}
	stop := c.track(w)
	if atLeast > 0 {
		// A namespace deleted and created again restarts its LSNs: a
		// Lookup that missed that would wait for ever. A standby's lag is
		// bounded (it serves Lookups only while in contact with the
		// leader), so past MaxCatchUp the table is sent as it is.
		id := c.nextID
		c.clock.AfterFunc(MaxCatchUp, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if w, ok := c.watches[id].(deltaWatch); ok {
				w.atLeast = 0
				if w.answer(c, force) {
					delete(c.watches, id)
				} else {
					c.watches[id] = w
				}
			}
		})
	}
	return stop, nil
}

// MaxCatchUp is the longest a reconnecting Lookup's first response waits
// for this node to publish a view as new as the blocks it holds.
const MaxCatchUp = 5 * time.Second

// wildcardVersions is the version of every resource in a wildcard
// subscription's scope: what such a subscription holds once answered. It
// is built once per update and shared read-only by every Lookup stream:
// as a copy of the last one built with the names updated since set or
// deleted, when the cache still remembers those updates (recent). A copy
// moves the map's memory without hashing a key; walking every resource
// and inserting it took 4.5-4.9 ms at R = 65536 (16,384 blocks), once per
// commit, holding the cache's lock (BenchmarkWildcardVersions).
func (c *typeCache) wildcardVersions() map[string]string {
	if c.wildcard != nil {
		return c.wildcard
	}
	if prev := c.lastWildcard; prev != nil && len(c.recent) > 0 && c.recent[0].epoch <= c.lastWildcardEpoch+1 {
		m := maps.Clone(prev)
		for _, u := range c.recent {
			if u.epoch <= c.lastWildcardEpoch {
				continue
			}
			for _, name := range u.names {
				if r, ok := c.res[name]; ok && !r.explicit {
					m[name] = r.version
				} else {
					delete(m, name)
				}
			}
		}
		c.wildcard = m
	} else {
		c.wildcard = make(map[string]string, len(c.res))
		for name, r := range c.res {
			if !r.explicit {
				c.wildcard[name] = r.version
			}
		}
	}
	c.lastWildcard, c.lastWildcardEpoch = c.wildcard, c.epoch
	return c.wildcard
}

func (w deltaWatch) answer(c *typeCache, force bool) bool {
	if w.atLeast > 0 {
		// A version that is not a number (a deleted namespace's) holds
		// nothing back.
		if v, err := strconv.ParseUint(c.version, 10, 64); err == nil && v < w.atLeast {
			return false
		}
		force = force || w.first
	}
	if w.lookup != nil {
		if w.lookup.epoch != 0 {
			// A stream that holds an epoch's versions is sent a change:
			// what it is sent is computed as it is sent (lateAnswer).
			if !force && c.lookupAnswerFor(w.lookup).empty() {
				return false
			}
			w.deliver(&deltaResponse{req: w.req, late: &lateAnswer{c: c, sub: w.lookup}})
			return true
		}
		rs := c.lookupResponses(w.req, w.lookup, force)
		for _, r := range rs {
			w.deliver(r)
		}
		return len(rs) > 0
	}
	changed, removed := c.changes(w.sub)
	if !force && len(changed) == 0 && len(removed) == 0 {
		return false
	}
	out := &deltaResponse{
		req: w.req,
		resp: &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: c.version,
			TypeUrl:           c.typeURL,
			Resources:         make([]*discovery.Resource, len(changed)),
			RemovedResources:  removed,
		},
	}
	for i, name := range changed {
		out.resp.Resources[i] = c.res[name].delta
	}
	out.returned = maps.Clone(w.sub.ReturnedResources())
	if out.returned == nil {
		out.returned = map[string]string{}
	}
	for _, name := range changed {
		out.returned[name] = c.res[name].version
	}
	for _, name := range removed {
		delete(out.returned, name)
	}
	w.out <- out
	return true
}

// lookupResponses brings a Lookup stream's subscription up to the cache's
// versions: it returns the responses that do so, none if the subscription
// holds them already and force is not set, and records the versions as
// held. c.mu is held.
func (c *typeCache) lookupResponses(req *cache.DeltaRequest, sub *lookupSub, force bool) []*deltaResponse {
	a := c.lookupAnswerFor(sub)
	if !force && a.empty() {
		return nil
	}
	sub.returned = c.wildcardVersions()
	sub.epoch = c.epoch
	return a.responses(req, c.version, c.typeURL, sub.returned)
}

// lateAnswer is a change due to a Lookup stream, queued for its sender,
// which computes the responses as it reaches it (take), from the versions
// the stream holds then to the cache's versions then.
//
// A change is due to thousands of streams at once, and their sender sends
// to one after another: at ten times PRS's load, 10,000 streams a node,
// the last was reached a few hundred milliseconds after the first. A
// response computed when the change was due missed whatever was committed
// meanwhile: a leave or a return is two commits, and when they reached a
// node more than FlushInterval apart (its CPU taken by a heartbeat to every
// stream, say), each stream reached after the second was sent the first,
// and the second only after acknowledging it: two pushes to each, twice
// the work for the node and the client, and a round trip later (managerscale
// counted 29,000-44,000 table updates for one change with 20,000 lookups).
// Computed as it is sent, it carries both. Streams reached at the same
// epoch still share one answer (lookupAnswerFor).
type lateAnswer struct {
	c   *typeCache
	sub *lookupSub
	// taking is set, under the stream's lock, once its sender computes
	// the responses: a change due after that needs a response of its own.
	taking bool
}

// take returns the responses that bring the stream up to the cache's
// versions now, and records the versions as held. It returns at least one
// response, even one that carries nothing (if the stream was brought up to
// date meanwhile, as by a second request of a client that did not wait for
// an answer): the watch it answers is gone, and the stream's next one opens
// only when the client acknowledges a response.
func (l *lateAnswer) take(req *cache.DeltaRequest) []*deltaResponse {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.c.lookupResponses(req, l.sub, true)
}

// lookupAnswer is what a Lookup stream is sent to bring it up to date: the
// resources, in order of name, cut into parts of at most
// wire.MaxLookupResponseBytes (a resource larger than that alone in its
// part; see wire.MorePartsSuffix), and the names removed.
type lookupAnswer struct {
	parts   [][]*discovery.Resource // never empty; only the last part may be
	removed []string
}

// lookupAnswerFor is the answer to a Lookup stream's subscription.
//
// Every Lookup stream that holds the wildcard versions of one epoch (the
// shared map wildcardVersions) holds the same versions, so it needs the
// same answer; so does every stream that holds nothing. Those answers are
// computed once per update and shared by the streams: the list of
// resources, and each part's encoding (frameIndex.addBody), so that a
// push of a change to 2,000 streams, or the whole table to 2,000 streams
// connecting at once, costs one list, one sort and one copy of the bytes,
// and per stream a response head. At R = 65536 a leave of one owner of
// 500 re-sends 131 blocks: listed, sorted and encoded per stream, that
// took the cache half a second to answer 2,000 streams. A stream that
// sent the versions it holds as it subscribed is answered on its own.
func (c *typeCache) lookupAnswerFor(sub *lookupSub) *lookupAnswer {
	shared := sub.epoch != 0 || len(sub.returned) == 0
	if shared {
		if a := c.answers[sub.epoch]; a != nil {
			return a
		}
	}
	var changed, removed []string
	if sub.epoch == 0 && len(sub.returned) == 0 {
		changed = c.scope(sub)
	} else {
		changed, removed = c.lookupChanges(sub)
	}
	rs := make([]*discovery.Resource, len(changed))
	a := &lookupAnswer{removed: removed}
	from, size := 0, 0
	for i, name := range changed {
		r := c.res[name]
		rs[i] = r.delta
		n := r.wireSize()
		if i > from && size+n > wire.MaxLookupResponseBytes {
			a.parts = append(a.parts, rs[from:i:i])
			from, size = i, 0
		}
		size += n
	}
	a.parts = append(a.parts, rs[from:])
	if !shared {
		return a
	}
	for _, p := range a.parts {
		c.frames.addBody(p)
	}
	if c.answers == nil {
		c.answers = map[uint64]*lookupAnswer{}
	}
	c.answers[sub.epoch] = a
	return a
}

// empty reports whether a sends nothing.
func (a *lookupAnswer) empty() bool {
	return len(a.parts) == 1 && len(a.parts[0]) == 0 && len(a.removed) == 0
}

// forget removes a's bodies from the frame index.
func (a *lookupAnswer) forget(x *frameIndex) {
	for _, p := range a.parts {
		x.removeBody(p)
	}
}

// responses are a's parts as one stream's responses: each its own message
// (the stream sets its nonce), their resources a's.
func (a *lookupAnswer) responses(req *cache.DeltaRequest, version, typeURL string, returned map[string]string) []*deltaResponse {
	out := make([]*deltaResponse, len(a.parts))
	for i, p := range a.parts {
		r := &deltaResponse{req: req, returned: returned, resp: &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: version + wire.MorePartsSuffix,
			TypeUrl:           typeURL,
			Resources:         p,
		}}
		if i == len(a.parts)-1 {
			r.resp.SystemVersionInfo = version
			r.resp.RemovedResources = a.removed
		}
		out[i] = r
	}
	return out
}

// sotwResponse is a state-of-the-world response built by a typeCache. Each
// is built for one watch: the server sets the nonce on the message.
type sotwResponse struct {
	req      *cache.Request
	resp     *discovery.DiscoveryResponse
	returned map[string]string
}

var _ cache.Response = (*sotwResponse)(nil)

func (r *sotwResponse) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) {
	return r.resp, nil
}
func (r *sotwResponse) GetRequest() *discovery.DiscoveryRequest { return r.req }
func (r *sotwResponse) GetVersion() (string, error)             { return r.resp.VersionInfo, nil }
func (r *sotwResponse) GetResponseVersion() string              { return r.resp.VersionInfo }
func (r *sotwResponse) GetReturnedResources() map[string]string { return r.returned }
func (r *sotwResponse) GetContext() context.Context             { return context.Background() }

// deltaResponse is a delta response built by a typeCache for one watch.
type deltaResponse struct {
	req      *cache.DeltaRequest
	resp     *discovery.DeltaDiscoveryResponse
	returned map[string]string
	// late, on a Lookup stream's queue only, stands for the responses its
	// sender computes as it reaches it; resp and returned are then nil.
	late *lateAnswer
}

var _ cache.DeltaResponse = (*deltaResponse)(nil)

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return r.resp, nil
}
func (r *deltaResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                 { return r.resp.SystemVersionInfo, nil }
func (r *deltaResponse) GetResponseVersion() string                        { return r.resp.SystemVersionInfo }
func (r *deltaResponse) GetNextVersionMap() map[string]string              { return r.returned }
func (r *deltaResponse) GetReturnedResources() map[string]string           { return r.returned }
func (r *deltaResponse) GetContext() context.Context                       { return context.Background() }
