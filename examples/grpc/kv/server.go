// Package kv is a proxyless gRPC key-value service on Fuge: the servers run
// behind ownerguard's gRPC interceptor, and clients dial xds:///<namespace>,
// so grpc-go's own xDS client, configured by the manager, sends each key to
// the one server that holds its lease. No proxy, and no Fuge code in the
// client beyond a bootstrap.
//
// # The service
//
// fuge.examples.kv.KV has two unary methods, Get and Put. The key is not in
// the message: it is the routing metadata, x-fuge-key, which both the
// client's ring hash and the server's guard read, so the two cannot
// disagree. Put takes the value (a google.protobuf.BytesValue) and returns
// google.protobuf.Empty; Get takes Empty and returns the value, or NotFound.
// The messages are protobuf's well-known wrappers, so there is no .proto
// file to compile: ServiceDesc is written by hand.
//
// Server keeps values in memory, each tagged with the ownership handle it was
// written under, and follows PRS Fig. 4 as the presence example does: the
// guard admits the RPC only if the key is held here (else UNAVAILABLE,
// "fuge: misdirected", which the route's retry policy retries), Get serves a
// value only if the key has been held without a break since it was written
// (else the key was lost and regained, and another server may have taken
// newer writes meanwhile), and the guard turns the answer into UNAVAILABLE if
// the lease was lost during the call.
//
// # The client
//
// Dial connects to xds:///<namespace> with a bootstrap naming the managers
// (Bootstrap); Get and Put set the routing metadata. See examples/grpc's
// README.md for running it.
package kv

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// Names of the service and its methods.
const (
	ServiceName = "fuge.examples.kv.KV"
	GetMethod   = "/" + ServiceName + "/Get"
	PutMethod   = "/" + ServiceName + "/Put"
	// KeyMetadata is the routing metadata that carries the key: the
	// manager's default routing header, X-Fuge-Key, in gRPC's lower case.
	KeyMetadata = "x-fuge-key"
	// MaxValueLen bounds a value, in bytes.
	MaxValueLen = 1 << 20
)

// ServiceDesc describes the service for grpc.Server.RegisterService; the
// implementation registered with it must be a *Server.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Get", Handler: getHandler},
		{MethodName: "Put", Handler: putHandler},
	},
}

func getHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(ctx context.Context, _ any) (any, error) { return srv.(*Server).get(ctx) }
	if icpt == nil {
		return h(ctx, in)
	}
	return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: GetMethod}, h)
}

func putHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(ctx context.Context, req any) (any, error) {
		return srv.(*Server).put(ctx, req.(*wrapperspb.BytesValue))
	}
	if icpt == nil {
		return h(ctx, in)
	}
	return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: PutMethod}, h)
}

// Server is the key-value service. It is safe for concurrent use.
type Server struct {
	owner ownerguard.Checker
	mu    sync.Mutex
	vals  map[string]record
}

// record is one key's value, tagged with the handle it was written under.
type record struct {
	val []byte
	h   ownerguard.Handle
}

// NewServer returns an empty Server whose stored values are validated with
// owner (the *ownerguard.Owner its guard asks).
func NewServer(owner ownerguard.Checker) *Server {
	return &Server{owner: owner, vals: map[string]record{}}
}

// Register registers the service on r. Serve it behind the guard:
// grpc.NewServer(grpc.UnaryInterceptor(guard.UnaryServerInterceptor())).
func (s *Server) Register(r grpc.ServiceRegistrar) { r.RegisterService(&ServiceDesc, s) }

// key is step 1 of PRS Fig. 4: the guard made the handle for the routing
// key, which is the key.
func key(ctx context.Context) (string, ownerguard.Handle, error) {
	h, ok := ownerguard.HandleFromContext(ctx)
	vs := metadata.ValueFromIncomingContext(ctx, KeyMetadata)
	if !ok || len(vs) != 1 || h.Key != ring.HashString(vs[0]) {
		return "", h, status.Error(codes.FailedPrecondition, "kv: serve behind ownerguard's interceptor, keyed by "+KeyMetadata)
	}
	return vs[0], h, nil
}

func (s *Server) put(ctx context.Context, in *wrapperspb.BytesValue) (*emptypb.Empty, error) {
	k, h, err := key(ctx)
	if err != nil {
		return nil, err
	}
	if len(in.GetValue()) > MaxValueLen {
		return nil, status.Errorf(codes.InvalidArgument, "kv: value longer than %d bytes", MaxValueLen)
	}
	// (2) nothing to check: the old value is replaced; (3) store the new
	// one with the handle it was written under.
	s.mu.Lock()
	s.vals[k] = record{val: in.GetValue(), h: h}
	s.mu.Unlock()
	return &emptypb.Empty{}, nil // (4), (5): the guard's
}

func (s *Server) get(ctx context.Context) (*wrapperspb.BytesValue, error) {
	k, _, err := key(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	rec, found := s.vals[k]
	// (2) A value whose lease was lost since it was written is stale.
	if found && !s.owner.CheckContinuousOwnership(rec.h) {
		delete(s.vals, k)
		found = false
	}
	s.mu.Unlock()
	if !found {
		return nil, status.Error(codes.NotFound, "kv: no such key")
	}
	return wrapperspb.Bytes(rec.val), nil
}

// Drop is for the owner's ownership upcall (ownerguard.OwnerConfig's
// OnOwnership): it forgets the values in the revoked ranges whose lease was
// lost since they were written, and returns how many. Get would never
// serve them; dropping frees the memory at once.
func (s *Server) Drop(revoked []ring.Range) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, rec := range s.vals {
		for _, r := range revoked {
			if r.Contains(rec.h.Key) && !s.owner.CheckContinuousOwnership(rec.h) {
				delete(s.vals, k)
				n++
				break
			}
		}
	}
	return n
}

// Len returns the number of values held, stale or not.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.vals)
}
