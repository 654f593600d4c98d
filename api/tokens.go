package api

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/store"
)

// tokenRecords turns tokens with secrets into the records the store
// keeps: digests and grants, never secrets.
func tokenRecords(toks []acl.Token, source string) []store.TokenRecord {
	out := make([]store.TokenRecord, 0, len(toks))
	for _, t := range toks {
		d := acl.DigestOf(t.Secret)
		out = append(out, store.TokenRecord{Accessor: acl.AccessorOf(d), Digest: d, Scope: string(t.Scope),
			Namespaces: slices.Clone(t.Namespaces), Namespace: t.Namespace, Service: t.Service, Instance: t.Instance,
			Node: t.Node, Source: source})
	}
	return out
}

// Authorizer returns the tokens in force: the node's own plus those
// stored in the cluster, rebuilt only when the stored ones change. The
// xDS server authenticates its streams with it.
func (s *Server) Authorizer() *acl.Authorizer {
	rev := s.cfg.Store.TokenRevision()
	if c := s.auth.Load(); c != nil && c.rev == rev {
		return c.a
	}
	recs, rev := s.cfg.Store.Tokens()
	toks := make([]acl.Token, 0, len(recs))
	for _, r := range recs {
		toks = append(toks, acl.Token{Digest: r.Digest, Scope: acl.Scope(r.Scope), Namespaces: r.Namespaces,
			Namespace: r.Namespace, Service: r.Service, Instance: r.Instance, Node: r.Node})
	}
	a, err := s.cfg.ACL.With(toks)
	if err != nil {
		// A stored token this version cannot read: serve the node's own
		// tokens rather than none.
		s.log.Error("building the authorizer from stored tokens", "err", err)
		a = s.cfg.ACL
	}
	s.auth.Store(&authCache{rev: rev, a: a})
	return a
}

type authCache struct {
	rev uint64
	a   *acl.Authorizer
}

// TokenRequest creates a token. Secret is optional: without one the
// server makes a random one.
type TokenRequest struct {
	Scope       acl.Scope `json:"scope"`
	Namespaces  []string  `json:"namespaces,omitempty"`
	Namespace   string    `json:"namespace,omitempty"`
	Service     string    `json:"service,omitempty"`
	Instance    string    `json:"instance,omitempty"`
	Node        string    `json:"node,omitempty"` // a prober token's server (its --node-id)
	Description string    `json:"description,omitempty"`
	Secret      string    `json:"secret,omitempty"`
}

// Token is a token as the API shows it. Secret is set only in the answer
// that creates it.
type Token struct {
	store.TokenRecord
	Digest string `json:"digest,omitempty"` // never shown
	Secret string `json:"secret,omitempty"`
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ManageCluster, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not manage tokens: %w", id.Scope, acl.ErrDenied)
	}
	var req TokenRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Description) > 256 {
		return 0, nil, badRequest("description", "is %d characters; at most 256", len(req.Description))
	}
	if req.Secret == "" {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, nil, err
		}
		req.Secret = base64.RawURLEncoding.EncodeToString(b[:])
	}
	t := acl.Token{Secret: req.Secret, Scope: req.Scope, Namespaces: req.Namespaces,
		Namespace: req.Namespace, Service: req.Service, Instance: req.Instance, Node: req.Node}
	if err := t.Validate(); err != nil {
		return 0, nil, fmt.Errorf("%v: %w", err, errBadRequest)
	}
	rec := tokenRecords([]acl.Token{t}, "api")[0]
	rec.Description = req.Description
	recs, _ := s.cfg.Store.Tokens()
	for _, cur := range recs {
		if cur.Accessor == rec.Accessor {
			return 0, nil, fmt.Errorf("secret: a token with this secret exists already (%s): %w", cur.Accessor, errConflict)
		}
	}
	if _, err := s.cfg.ACL.Authenticate(req.Secret); err == nil && s.cfg.ACL.Enabled() {
		return 0, nil, fmt.Errorf("secret: a token of the servers' ACL files has this secret: %w", errConflict)
	}
	if err := s.cfg.Store.PutTokens(r.Context(), id.Name, []store.TokenRecord{rec}); err != nil {
		return 0, nil, err
	}
	s.log.Info("token created", "accessor", rec.Accessor, "scope", rec.Scope, "by", id.Name)
	return http.StatusCreated, Token{TokenRecord: rec, Secret: req.Secret}, nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ManageCluster, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not list tokens: %w", id.Scope, acl.ErrDenied)
	}
	recs, _ := s.cfg.Store.Tokens()
	out := make([]Token, 0, len(recs))
	for _, rec := range recs {
		out = append(out, Token{TokenRecord: rec})
	}
	return http.StatusOK, out, nil
}

func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ManageCluster, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not delete tokens: %w", id.Scope, acl.ErrDenied)
	}
	acc := r.PathValue("accessor")
	if err := s.cfg.Store.DeleteToken(r.Context(), id.Name, acc); err != nil {
		return 0, nil, err
	}
	s.log.Info("token deleted", "accessor", acc, "by", id.Name)
	return http.StatusOK, map[string]string{"accessor": acc}, nil
}
