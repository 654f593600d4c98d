package xdsserver

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/internal/acl"
)

// allowFunc says whether a stream may see the resources of a service.
// nil allows everything (ACLs off).
type allowFunc func(ns, svc string) bool

func (f allowFunc) allows(r resource) bool { return f.service(r.ns, r.svc) }

func (f allowFunc) service(ns, svc string) bool { return f == nil || f(ns, svc) }

// authorize authenticates a stream by the token in its metadata
// ("authorization: Bearer TOKEN", as grpc-go's call credentials send
// it) and returns what the token may watch, the services it may read
// (SPEC §8), and the token's identity ("" with ACLs off). A stream
// without a token, or with one the server does not know, is refused
// with UNAUTHENTICATED before it counts towards the admission cap.
func (s *Server) authorize(ctx context.Context) (allowFunc, string, error) {
	if s.cfg.Authorizer == nil {
		return nil, "", nil
	}
	a := s.cfg.Authorizer()
	if a == nil || !a.Enabled() {
		return nil, "", nil
	}
	tok, err := bearer(ctx)
	if err == nil {
		var id acl.Identity
		if id, err = a.Authenticate(tok); err == nil {
			return func(ns, svc string) bool { return id.Allows(acl.Read, ns, svc, "") }, id.Name, nil
		}
	}
	s.m.refused.WithLabelValues("unauthenticated").Inc()
	if errors.Is(err, acl.ErrUnknownToken) {
		return nil, "", grpcstatus.Error(codes.Unauthenticated, "xdsserver: unknown token")
	}
	return nil, "", grpcstatus.Errorf(codes.Unauthenticated, "xdsserver: %v", err)
}

// bearer returns the token of the stream's "authorization" metadata.
func bearer(ctx context.Context) (string, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) == 0 {
		return "", acl.ErrNoToken
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", errors.New(`authorization metadata must be "Bearer TOKEN"`)
	}
	return tok, nil
}
