package ownerguard_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
)

func keyContext(t *testing.T, key string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "x-fuge-key", key)
}

// TestGRPCStreamLostMidway: every message is sent under a fresh check, so
// the messages that left were computed under the lease; the first send
// after the loss fails and the stream ends Unavailable, not misdirected.
func TestGRPCStreamLostMidway(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	svc := &testService{app: func(ownerguard.Handle, bool) string { return "m" }}
	svc.sent = func(i int) {
		if i == 1 {
			fc.lose(heldKey)
		}
	}
	client := serveGRPC(t, newTestGuard(t, fc, nil), svc)
	// The service's handler returns the error of its third Send.
	req := &testpb.StreamingOutputCallRequest{ResponseParameters: make([]*testpb.ResponseParameters, 5)}
	stream, err := client.StreamingOutputCall(keyContext(t, heldKey), req)
	if err != nil {
		t.Fatal(err)
	}
	var got int
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
		got++
	}
	if got != 2 {
		t.Errorf("received %d messages, want 2 (sent before the loss)", got)
	}
	if status.Code(err) != codes.Unavailable || ownerguard.IsMisdirected(err) || !strings.Contains(err.Error(), "lease lost") {
		t.Errorf("stream ended with %v, want Unavailable (lease lost)", err)
	}
	if hdr, _ := stream.Header(); len(hdr.Get("fuge-generation")) != 1 || hdr.Get("fuge-generation")[0] != "7" {
		t.Errorf("header %v, want fuge-generation 7", hdr)
	}
}

// TestGRPCUnaryLostReplacesError: after a loss, even the handler's error is
// not trusted (it may come from stale state): the client gets Unavailable.
func TestGRPCUnaryLostReplacesError(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	g := newTestGuard(t, fc, nil)
	icpt := g.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/t.S/M"}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-fuge-key", heldKey))
	notFound := status.Error(codes.NotFound, "no such device")
	for _, tc := range []struct {
		name string
		lose bool
		want codes.Code
	}{
		{"held", false, codes.NotFound},
		{"lost", true, codes.Unavailable},
	} {
		_, err := icpt(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
			if h, ok := ownerguard.HandleFromContext(ctx); !ok || h.Gen != heldGen {
				t.Errorf("%s: handle %+v %v", tc.name, h, ok)
			}
			if tc.lose {
				fc.lose(heldKey)
			}
			return nil, notFound
		})
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestGRPCStreamHandleInContext: a stream handler finds the handle in its
// stream's context, and the guard's stream passes messages both ways.
func TestGRPCStreamHandleInContext(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	g := newTestGuard(t, fc, nil)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-fuge-key", heldKey))
	ss := &fakeServerStream{ctx: ctx}
	err := g.StreamServerInterceptor()(nil, ss, &grpc.StreamServerInfo{FullMethod: "/t.S/M"}, func(_ any, s grpc.ServerStream) error {
		h, ok := ownerguard.HandleFromContext(s.Context())
		if !ok || h.Gen != heldGen {
			t.Errorf("handle %+v %v", h, ok)
		}
		if s.Context().Value(ctxKey{}) != "outer" {
			t.Error("the stream's context lost the values of the original")
		}
		return s.SendMsg("a")
	})
	if err != nil || len(ss.sent) != 1 {
		t.Errorf("stream: %v, sent %v", err, ss.sent)
	}
	if got := ss.header.Get("fuge-owner"); len(got) != 1 || got[0] != guardName {
		t.Errorf("header %v", ss.header)
	}
}

type ctxKey struct{}

// fakeServerStream records what a handler sends.
type fakeServerStream struct {
	grpc.ServerStream
	ctx    context.Context
	header metadata.MD
	sent   []any
}

func (s *fakeServerStream) Context() context.Context {
	return context.WithValue(s.ctx, ctxKey{}, "outer")
}
func (s *fakeServerStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *fakeServerStream) SetTrailer(metadata.MD) {}
func (s *fakeServerStream) SendMsg(m any) error {
	s.sent = append(s.sent, m)
	return nil
}
func (s *fakeServerStream) RecvMsg(any) error { return io.EOF }

// testService answers UnaryCall and StreamingOutputCall with app's body
// (one message per ResponseParameters entry, the handler's run before the
// first).
type testService struct {
	testpb.UnimplementedTestServiceServer
	app  appHandler
	sent func(i int) // called after message i of a stream was sent
}

func (s *testService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	h, ok := ownerguard.HandleFromContext(ctx)
	body := s.app(h, ok)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-app", "1"))
	return &testpb.SimpleResponse{Hostname: body}, nil
}

func (s *testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	h, ok := ownerguard.HandleFromContext(stream.Context())
	body := s.app(h, ok)
	for i := range max(1, len(req.ResponseParameters)) {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(body)}}); err != nil {
			return err
		}
		if s.sent != nil {
			s.sent(i)
		}
	}
	return nil
}

// serveGRPC serves svc behind g's interceptors on 127.0.0.1 until the test
// ends, and returns a client.
func serveGRPC(t *testing.T, g *ownerguard.Guard, svc *testService) testpb.TestServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(g.UnaryServerInterceptor()), grpc.StreamInterceptor(g.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(s, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		s.Stop()
		<-done
	})
	return testpb.NewTestServiceClient(cc)
}

func grpcContext(t *testing.T, c guardCall) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	md := metadata.MD{}
	if c.keys != nil {
		md["x-fuge-key"] = c.keys
	}
	if c.gens != nil {
		md["fuge-generation"] = c.gens
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// grpcResult maps a gRPC outcome to HTTP terms (see guardResult).
func grpcResult(t *testing.T, body string, err error, hdr, trl metadata.MD) guardResult {
	t.Helper()
	r := guardResult{code: http.StatusOK, body: body}
	if v := hdr.Get("fuge-generation"); len(v) > 0 {
		r.gen = v[0]
	}
	if v := hdr.Get("fuge-owner"); len(v) > 0 {
		r.owner = v[0]
	}
	r.fromApp = len(hdr.Get("x-app")) > 0
	if err == nil {
		return r
	}
	st := status.Convert(err)
	r.body = st.Message()
	misdirected := ownerguard.IsMisdirected(err)
	trailer := len(trl.Get(ownerguard.MisdirectedTrailer)) == 1 && trl.Get(ownerguard.MisdirectedTrailer)[0] == "1"
	if misdirected != trailer {
		t.Errorf("IsMisdirected(%v) = %v, but trailer %v", err, misdirected, trl)
	}
	if refused := st.Code() == codes.InvalidArgument || misdirected; refused {
		// A refusal must be trailers-only: grpc-go's retry policy, and so
		// an xDS route's, retries nothing else.
		if len(hdr.Get("fuge-owner")) > 0 || len(hdr.Get("fuge-generation")) > 0 {
			t.Errorf("refused RPC sent header metadata %v: not trailers-only, so no retry policy retries it", hdr)
		}
		if v := trl.Get("fuge-generation"); len(v) > 0 {
			r.gen = v[0]
		}
		if v := trl.Get("fuge-owner"); len(v) > 0 {
			r.owner = v[0]
		}
	}
	switch {
	case st.Code() == codes.InvalidArgument:
		r.code = http.StatusBadRequest
	case st.Code() == codes.Unavailable && misdirected:
		r.code = http.StatusMisdirectedRequest
	case st.Code() == codes.Unavailable:
		r.code = http.StatusServiceUnavailable
	default:
		t.Errorf("unexpected status %v", err)
		r.code = -1
	}
	return r
}

func startGRPCUnary(t *testing.T, g *ownerguard.Guard, app appHandler) func(guardCall) guardResult {
	client := serveGRPC(t, g, &testService{app: app})
	return func(c guardCall) guardResult {
		var hdr, trl metadata.MD
		resp, err := client.UnaryCall(grpcContext(t, c), &testpb.SimpleRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
		return grpcResult(t, resp.GetHostname(), err, hdr, trl)
	}
}

func startGRPCStream(t *testing.T, g *ownerguard.Guard, app appHandler) func(guardCall) guardResult {
	client := serveGRPC(t, g, &testService{app: app})
	return func(c guardCall) guardResult {
		stream, err := client.StreamingOutputCall(grpcContext(t, c), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatalf("StreamingOutputCall: %v", err)
		}
		var body string
		for {
			m, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				hdr, _ := stream.Header()
				return grpcResult(t, body, err, hdr, stream.Trailer())
			}
			body += string(m.GetPayload().GetBody())
		}
	}
}
