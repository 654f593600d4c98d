package api

import "slices"

// Patterns returns the route patterns s registered, in order
// ("GET /v1/services"), for the test that holds docs/openapi.yaml to
// them.
func (s *Server) Patterns() []string { return slices.Clone(s.patterns) }
