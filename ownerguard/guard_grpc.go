package ownerguard

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// UnaryServerInterceptor returns the guard as a gRPC unary interceptor: an
// RPC is refused before its handler runs unless its key is held here under
// a generation at least the one it carries, and its reply (or error) is
// replaced by codes.Unavailable if the key was not held throughout (see
// the package documentation, "Middleware").
func (g *Guard) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		h, v := g.admitGRPC(ctx, info.FullMethod)
		if v != admitted {
			// Trailers only: grpc-go's retry policy (and so the xDS
			// route's) retries only a trailers-only response, so nothing
			// may be sent as header metadata.
			_ = grpc.SetTrailer(ctx, g.refusalTrailer(v, h))
			return nil, g.grpcErr(v)
		}
		_ = grpc.SetHeader(ctx, g.gen(h.Gen).md)
		resp, err := handler(&handleCtx{Context: ctx, h: h}, req)
		if !g.held(h) {
			return nil, g.errLost
		}
		return resp, err
	}
}

// StreamServerInterceptor returns the guard as a gRPC stream interceptor.
// Admission is as for unary RPCs. Every message the handler sends is
// preceded by a check of the lease, so every message that left was
// computed under continuous ownership; once the lease is lost, SendMsg
// fails with codes.Unavailable, and the stream ends with it, whatever the
// handler returns (see the package documentation, "Middleware").
func (g *Guard) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		h, v := g.admitGRPC(ctx, info.FullMethod)
		if v != admitted {
			ss.SetTrailer(g.refusalTrailer(v, h)) // trailers only, as above
			return g.grpcErr(v)
		}
		_ = ss.SetHeader(g.gen(h.Gen).md)
		gs := &guardStream{ServerStream: ss, g: g, ctx: handleCtx{Context: ctx, h: h}}
		err := handler(srv, gs)
		if !g.held(h) {
			return g.errLost
		}
		return err
	}
}

// guardStream checks the lease before every message it sends, and carries
// the handle in its context.
type guardStream struct {
	grpc.ServerStream
	g   *Guard
	ctx handleCtx
}

func (s *guardStream) Context() context.Context { return &s.ctx }

func (s *guardStream) SendMsg(m any) error {
	if !s.g.held(s.ctx.h) {
		return s.g.errLost
	}
	return s.ServerStream.SendMsg(m)
}

// admitGRPC runs the checks before the handler.
func (g *Guard) admitGRPC(ctx context.Context, fullMethod string) (Handle, verdict) {
	var key string
	if g.cfg.GRPCKey != nil {
		if k, ok := g.cfg.GRPCKey(ctx, fullMethod); ok {
			key = k
		}
	} else {
		ks := g.keys.Load()
		if ks == nil { // the namespace's header is not known yet: nothing is held
			return Handle{}, notHeld
		}
		switch vs := metadata.ValueFromIncomingContext(ctx, ks.grpcKey); len(vs) {
		case 0:
		case 1:
			key = vs[0]
		default:
			return Handle{}, repeatedKey
		}
	}
	if key == "" {
		return Handle{}, noKey
	}
	var reqGen lease.Gen
	if vs := metadata.ValueFromIncomingContext(ctx, genKey); len(vs) > 0 {
		var ok bool
		if reqGen, ok = parseGen(vs[0]); !ok || len(vs) > 1 {
			return Handle{}, badGen
		}
	}
	return g.admit(ring.HashString(key), reqGen)
}

// refusalTrailer is the trailer metadata of a refused RPC: the owner, for
// tooNew the generation held, and for a misdirected RPC (notHeld, tooNew)
// the fuge-misdirected mark.
func (g *Guard) refusalTrailer(v verdict, h Handle) metadata.MD {
	md := g.ownerMD
	if v == tooNew {
		md = g.gen(h.Gen).md
	}
	if v == notHeld || v == tooNew {
		return metadata.Join(md, g.missMD)
	}
	return md
}

// grpcErr is the status of a refused RPC.
func (g *Guard) grpcErr(v verdict) error {
	switch v {
	case noKey:
		if g.cfg.GRPCKey != nil {
			return g.errNoKeyFunc
		}
		return g.keys.Load().errNoKey
	case repeatedKey:
		return g.keys.Load().errRepeated
	case badGen:
		return g.errBadGen
	case notHeld:
		return g.errNotHeld
	case tooNew:
		return g.errTooNew
	}
	return nil
}
