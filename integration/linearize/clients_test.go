package linearize

import (
	"net/http"
	"testing"
)

// TestAnswer: how each answer of the API enters the history.
func TestAnswer(t *testing.T) {
	reg := Input{Kind: Register, Key: "a", RegID: "r1"}
	drain := Input{Kind: Drain, Key: "a", Inc: 3}
	rd := Input{Kind: Read, Key: "a"}
	inst := `{"instance_id": "a", "incarnation": 3, "lifecycle": "ready"}`
	for _, tc := range []struct {
		name   string
		in     Input
		code   int
		body   string
		want   Output
		record bool
		err    bool
	}{
		{"created", reg, http.StatusCreated, inst, Output{Created, 3, "ready"}, true, false},
		{"retry", reg, http.StatusOK, inst, Output{OK, 3, "ready"}, true, false},
		{"fenced", drain, http.StatusConflict, `{"error": "x", "code": "fenced"}`, Output{Result: Fenced}, true, false},
		{"not found", drain, http.StatusNotFound, `{"error": "x", "code": "not_found"}`, Output{Result: NotFound}, true, false},
		{"503 write: unknown", drain, http.StatusServiceUnavailable, `{"error": "x", "code": "no_leader"}`, Output{}, true, false},
		{"503 read: not recorded", rd, http.StatusServiceUnavailable, `{"error": "x", "code": "no_leader"}`, Output{}, false, false},
		{"read finds it", rd, http.StatusOK, `[{"instance_id": "b", "incarnation": 9, "lifecycle": "ready"}, ` + inst + `]`, Output{OK, 3, "ready"}, true, false},
		{"read takes the store's record, listed first", rd, http.StatusOK, `[` + inst + `, {"instance_id": "a", "incarnation": 2, "lifecycle": "ready"}]`, Output{OK, 3, "ready"}, true, false},
		{"a read of a replica without the service finds none", rd, http.StatusNotFound, `{"error": "x", "code": "not_found"}`, Output{Result: OK}, true, false},
		{"read finds none", rd, http.StatusOK, `[{"instance_id": "b", "incarnation": 9, "lifecycle": "ready"}]`, Output{Result: OK}, true, false},
		{"another conflict is outside the model", reg, http.StatusConflict, `{"error": "x", "code": "conflict"}`, Output{}, false, true},
		{"a budget refusal is outside the model", drain, http.StatusTooManyRequests, `{"error": "x", "code": "disruption_budget"}`, Output{}, false, true},
		{"a bad request is outside the model", reg, http.StatusBadRequest, `{"error": "x", "code": "invalid_argument"}`, Output{}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, record, err := answer(tc.in, tc.code, []byte(tc.body))
			if got != tc.want || record != tc.record || (err != nil) != tc.err {
				t.Errorf("answer(%d %s) = %+v, record %v, err %v; want %+v, record %v, err %v", tc.code, tc.body, got, record, err, tc.want, tc.record, tc.err)
			}
		})
	}
}
