package manager

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// ownerService serves OwnerService.Lease on every node; only the leader
// accepts streams.
type ownerService struct {
	fugev1.UnimplementedOwnerServiceServer
	s *Server
}

func (o *ownerService) Lease(stream fugev1.OwnerService_LeaseServer) error {
	s := o.s
	ctx := stream.Context()
	if err := s.CheckLeader(ctx); err != nil {
		return err
	}
	if !s.sessions.allow(s.clientKey(ctx), s.cfg.Clock.Now()) {
		return status.Errorf(codes.ResourceExhausted, "manager: too many owner sessions from this client (at most %d, then %d a second)", s.cfg.SessionBurst, s.cfg.SessionRate)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	req, err := s.requestFrom(first)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	// The name is the certificate's (every later message must carry the
	// same namespace, name and nonce).
	if err := s.checkOwner(ctx, req); err != nil {
		return err
	}
	nc, ok := s.fsm.namespaceConfig(req.Namespace)
	if !ok {
		return status.Errorf(codes.NotFound, "%v: %q", ErrUnknownNamespace, req.Namespace)
	}
	// An owner whose lease outlasts the manager's hold breaks the
	// single-copy guarantee: refuse a T that is not the namespace's.
	if first.LeaseDurationMs != nc.LeaseDuration.Milliseconds() {
		return status.Errorf(codes.InvalidArgument, "%v: owner lease duration %dms, namespace %q has %v",
			ErrBadRequest, first.LeaseDurationMs, req.Namespace, nc.LeaseDuration)
	}
	s.mu.Lock()
	l := s.leader
	s.mu.Unlock()
	if l == nil {
		return s.CheckLeader(ctx)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &ownerStream{key: streamKey{req.Namespace, req.Owner}, nonce: req.Nonce, out: make(chan *fugev1.LeaseResponse, 64), cancel: cancel, packed: first.Packed}
	if err := l.open(st); err != nil {
		if errors.Is(err, ErrOwnerInUse) {
			return status.Errorf(codes.AlreadyExists, "%v: %q in %q", err, req.Owner, req.Namespace)
		}
		return s.CheckLeader(ctx)
	}
	defer l.closed(st)
	s.metrics.ownerStreams.Inc()
	defer s.metrics.ownerStreams.Dec()

	recvErr := make(chan error, 1)
	go func() {
		for {
			if err := l.request(req); err != nil {
				recvErr <- err
				return
			}
			m, err := stream.Recv()
			if err == io.EOF {
				recvErr <- nil // the owner closed its session cleanly
				return
			}
			if err != nil {
				recvErr <- err
				return
			}
			if req, err = s.requestFrom(m); err != nil {
				recvErr <- status.Error(codes.InvalidArgument, err.Error())
				return
			}
			if req.Namespace != st.key.ns || req.Owner != st.key.owner || req.Nonce != st.nonce {
				recvErr <- status.Error(codes.InvalidArgument, "manager: a stream carries one owner session")
				return
			}
		}
	}()
	for {
		select {
		case m := <-st.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-recvErr:
			if err == nil {
				return nil
			}
			return o.streamError(ctx, err)
		case <-sctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return s.CheckLeader(ctx) // replaced, or leadership ended
		}
	}
}

// requestFrom converts an owner request from the wire and checks every
// field a client chose against its bound (lease.Valid*), before anything
// else sees it: a refused request changes nothing.
func (s *Server) requestFrom(m *fugev1.LeaseRequest) (lease.LeaseRequest, error) {
	req, err := wire.RequestFrom(m)
	if err != nil || s.cfg.UnsafeNoInputChecks {
		return req, err
	}
	if err := lease.ValidName("namespace", req.Namespace); err != nil {
		return req, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := lease.ValidName("owner", req.Owner); err != nil {
		return req, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := lease.ValidAddr("addr", req.Addr); err != nil {
		return req, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return req, nil
}

func (o *ownerService) streamError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrNotLeader):
		return o.s.CheckLeader(ctx)
	case errors.Is(err, ErrUnknownNamespace):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrIncarnationReplaced), errors.Is(err, ErrAddressInUse):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, ErrBadRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrNamespaceFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return err
}
