package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

var (
	errRouteNotFound = errors.New("no such route")
	errMethod        = errors.New("method not allowed on this route")
	errBadRequest    = errors.New("bad request")
	errConflict      = errors.New("conflict")
)

// badRequest is malformed input found by the API itself (not the store).
func badRequest(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errBadRequest)
}

// status maps an error to its status and code: the one translation point
// from errors to HTTP.
func status(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, wire.CodeTooLarge
	case errors.Is(err, wire.ErrInvalid), errors.Is(err, errBadRequest):
		return http.StatusBadRequest, wire.CodeInvalid
	case errors.Is(err, acl.ErrNoToken), errors.Is(err, acl.ErrUnknownToken):
		return http.StatusUnauthorized, wire.CodeUnauthenticated
	case errors.Is(err, acl.ErrDenied):
		return http.StatusForbidden, wire.CodeDenied
	case errors.Is(err, addrpolicy.ErrForbidden):
		return http.StatusForbidden, wire.CodeForbiddenAddress
	case errors.Is(err, store.ErrNotFound), errors.Is(err, errRouteNotFound):
		return http.StatusNotFound, wire.CodeNotFound
	case errors.Is(err, store.ErrFenced):
		return http.StatusConflict, wire.CodeFenced
	case errors.Is(err, store.ErrCapacity):
		return http.StatusConflict, wire.CodeCapacity
	case errors.Is(err, errConflict):
		return http.StatusConflict, wire.CodeConflict
	case errors.Is(err, store.ErrBudget):
		return http.StatusTooManyRequests, wire.CodeBudget
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed, wire.CodeMethod
	case errors.Is(err, store.ErrNotLeader), errors.Is(err, store.ErrNoLeader), errors.Is(err, store.ErrClosed):
		return http.StatusServiceUnavailable, wire.CodeNoLeader
	}
	return http.StatusInternalServerError, wire.CodeInternal
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, route string, err error) {
	code, c := status(err)
	msg := userMessage(err)
	if code == http.StatusInternalServerError {
		s.log.Error("request failed", "route", route, "err", err)
	}
	if r.Method != http.MethodGet {
		s.metrics.rejected.WithLabelValues(c).Inc()
	}
	s.metrics.requests.WithLabelValues(route, fmt.Sprint(code)).Inc()
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cairn"`)
	}
	writeJSON(w, code, wire.Error{Error: msg, Code: c})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

// decode reads exactly one JSON value into v. Unknown fields, trailing
// data and type mismatches are refused with the field named.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		var typeErr *json.UnmarshalTypeError
		var synErr *json.SyntaxError
		switch {
		case errors.As(err, &tooLarge):
			return err
		case errors.Is(err, io.EOF):
			return badRequest("body", "is empty; want a JSON object")
		case errors.As(err, &typeErr):
			field := typeErr.Field
			if field == "" { // the whole body has the wrong type, such as an array
				field = "body"
			}
			if typeErr.Type == reflect.TypeFor[wire.Duration]() {
				return badRequest(field, "want a duration string such as \"30s\", got %s", typeErr.Value)
			}
			if typeErr.Type == reflect.TypeFor[wire.Budget]() {
				return badRequest(field, "want a count such as 2 or a percentage such as \"25%%\", got %s", typeErr.Value)
			}
			return badRequest(field, "want %s, got JSON %s", typeErr.Type, typeErr.Value)
		case errors.As(err, &synErr):
			return badRequest("body", "malformed JSON at byte %d: %v", synErr.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badRequest(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field")
		}
		return badRequest("body", "%v", err)
	}
	// Only whitespace may follow. (dec.More would let a stray '}' or ']'
	// through, and would not notice a body over the size limit.)
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return badRequest("body", "trailing data after the JSON object")
	}
	return nil
}

func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", nil
	}
	// The scheme is case-insensitive (RFC 9110 §11.1).
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", fmt.Errorf("authorization header must be \"Bearer TOKEN\": %w", acl.ErrNoToken)
	}
	return tok, nil
}

// userMessage is err's text without its sentinel suffix (": invalid
// input"), which says nothing to a user.
func userMessage(err error) string {
	msg := err.Error()
	for _, p := range []string{": " + wire.ErrInvalid.Error(), ": " + errBadRequest.Error(),
		": " + addrpolicy.ErrForbidden.Error(), ": " + acl.ErrDenied.Error(), ": " + store.ErrFenced.Error(),
		": " + store.ErrNotFound.Error(), ": " + errConflict.Error(), ": " + store.ErrBudget.Error(),
		": " + store.ErrCapacity.Error()} {
		msg = strings.TrimSuffix(msg, p)
	}
	return msg
}
