package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"
)

// Handler is the control API of s (see the package doc).
func Handler(s *Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.States())
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, _ *http.Request) {
		st := Stats{Instances: len(s.insts), Listening: s.Listening(), Goroutines: runtime.NumGoroutine()}
		if b, err := os.ReadFile("/proc/self/status"); err == nil {
			st.RSSBytes = parseRSS(string(b))
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /v1/mode", func(w http.ResponseWriter, r *http.Request) {
		var req ModeRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
			return
		}
		n, err := s.Set(req)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"changed": n})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Control is a client of a fleet's control API.
type Control struct {
	// URL is the API's base, as the process printed it.
	URL string
	hc  *http.Client
}

// NewControl returns a client of the control API at url.
func NewControl(url string) *Control {
	return &Control{URL: strings.TrimRight(url, "/"), hc: &http.Client{Timeout: 30 * time.Second}}
}

// Set applies a mode request and returns how many instances changed.
func (c *Control) Set(ctx context.Context, r ModeRequest) (int, error) {
	var out struct {
		Changed int `json:"changed"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/mode", r, &out); err != nil {
		return 0, err
	}
	return out.Changed, nil
}

// SetIDs sets the mode of the instances named (delay for slow only).
func (c *Control) SetIDs(ctx context.Context, mode string, delay time.Duration, ids ...string) error {
	_, err := c.Set(ctx, ModeRequest{IDs: ids, Mode: mode, Delay: Duration(delay)})
	return err
}

// SetService sets the mode of every instance of service ("ns/svc"),
// in zone if it is not empty.
func (c *Control) SetService(ctx context.Context, service, zone, mode string, delay time.Duration) (int, error) {
	return c.Set(ctx, ModeRequest{Service: service, Zone: zone, Mode: mode, Delay: Duration(delay)})
}

// Instances lists every instance with its mode and count.
func (c *Control) Instances(ctx context.Context) ([]InstanceState, error) {
	var out []InstanceState
	err := c.do(ctx, http.MethodGet, "/v1/instances", nil, &out)
	return out, err
}

// Stats returns the process's figures.
func (c *Control) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &out)
	return out, err
}

func (c *Control) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("fleet %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("fleet %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fleet %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}
