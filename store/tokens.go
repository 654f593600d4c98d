package store

import (
	"context"
	"fmt"
	"slices"
	"sort"
)

// PutTokens stores tokens (digests, never secrets); a token already
// stored with the same grant is left as it is.
func (s *Store) PutTokens(ctx context.Context, actor string, toks []TokenRecord) error {
	for i, t := range toks {
		if err := t.validate(); err != nil {
			return fmt.Errorf("tokens[%d]: %w", i, err)
		}
	}
	_, err := s.propose(ctx, command{Op: opPutTokens, Actor: actor, Tokens: toks})
	return err
}

// DeleteToken removes the token with the given accessor.
func (s *Store) DeleteToken(ctx context.Context, actor, accessor string) error {
	s.fsm.mu.RLock()
	_, ok := s.fsm.tokens[accessor]
	s.fsm.mu.RUnlock()
	if !ok && s.LeaderReady() {
		return fmt.Errorf("token %q is not stored (tokens of ACL files live in the files): %w", accessor, ErrNotFound)
	}
	_, err := s.propose(ctx, command{Op: opDelToken, Actor: actor, Accessor: accessor})
	return err
}

// Tokens returns the stored tokens, sorted by accessor, and the revision
// of their last change (to rebuild an authorizer only when they change).
func (s *Store) Tokens() ([]TokenRecord, uint64) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	out := make([]TokenRecord, 0, len(s.fsm.tokens))
	for _, t := range s.fsm.tokens {
		t.Namespaces = slices.Clone(t.Namespaces)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Accessor < out[j].Accessor })
	return out, s.fsm.tokenRev
}

// TokenRevision returns the revision of the last token change.
func (s *Store) TokenRevision() uint64 {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	return s.fsm.tokenRev
}
