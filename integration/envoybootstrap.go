package integration

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The bootstrap an Envoy of the harness runs: the shipped one, with
// what a user changes too.

// EnvoyBootstrapFor returns the shipped bootstrap src changed for cfg:
// the TLS block uncommented (cfg.TLS), api_type GRPC (cfg.SotW), the
// bearer token, the cairn cluster's endpoints cfg.Servers, the node's
// region (cfg.Region), the cluster the listener routes to (cfg.Cluster),
// the admin and listener ports (0: any free port). It fails if the
// bootstrap no longer holds what it changes.
func EnvoyBootstrapFor(src []byte, cfg EnvoyConfig, adminPort, listenerPort int) ([]byte, error) {
	text := string(src)
	if cfg.TLS != nil {
		var err error
		if text, err = uncommentTLS(text, *cfg.TLS); err != nil {
			return nil, err
		}
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvoyBootstrap, err)
	}
	// set replaces the value at path, which must be there already.
	set := func(v any, path ...any) error {
		parent := yamlAt(doc, path[:len(path)-1]...)
		switch k := path[len(path)-1].(type) {
		case string:
			if m, ok := parent.(map[string]any); ok && m[k] != nil {
				m[k] = v
				return nil
			}
		case int:
			if l, ok := parent.([]any); ok && k < len(l) {
				l[k] = v
				return nil
			}
		}
		return fmt.Errorf("%s has no %v", EnvoyBootstrap, path)
	}
	var eps []any
	for _, s := range cfg.Servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", s, err)
		}
		p, _ := strconv.Atoi(port)
		eps = append(eps, map[string]any{"endpoint": map[string]any{"address": map[string]any{
			"socket_address": map[string]any{"address": host, "port_value": p}}}})
	}
	clusters, _ := yamlAt(doc, "static_resources", "clusters").([]any)
	cairn := -1
	for i, c := range clusters {
		if m, ok := c.(map[string]any); ok && m["name"] == "cairn" {
			cairn = i
		}
	}
	if cairn < 0 {
		return nil, fmt.Errorf("%s has no static cluster named cairn", EnvoyBootstrap)
	}
	steps := []error{
		set(eps, "static_resources", "clusters", cairn, "load_assignment", "endpoints", 0, "lb_endpoints"),
		set(adminPort, "admin", "address", "socket_address", "port_value"),
		set(listenerPort, "static_resources", "listeners", 0, "address", "socket_address", "port_value"),
	}
	if cfg.SotW {
		steps = append(steps, set("GRPC", "dynamic_resources", "ads_config", "api_type"))
	}
	if cfg.Region != "" {
		steps = append(steps, set(cfg.Region, "node", "locality", "region"))
	}
	if cfg.Cluster != "" {
		steps = append(steps, set(cfg.Cluster, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0,
			"typed_config", "route_config", "virtual_hosts", 0, "routes", 0, "route", "cluster"))
	}
	if cfg.Token != "" {
		md := []any{map[string]any{"key": "authorization", "value": "Bearer " + cfg.Token}}
		for _, svc := range []any{
			yamlAt(doc, "dynamic_resources", "ads_config", "grpc_services", 0),
			yamlAt(doc, "cluster_manager", "load_stats_config", "grpc_services", 0),
		} {
			m, ok := svc.(map[string]any)
			if !ok {
				steps = append(steps, fmt.Errorf("%s: no grpc_services to send the token on", EnvoyBootstrap))
				continue
			}
			m["initial_metadata"] = md
		}
	}
	if err := errors.Join(steps...); err != nil {
		return nil, err
	}
	return yaml.Marshal(doc)
}

// yamlAt returns the value at path in doc (map keys and list indexes), or
// nil.
func yamlAt(doc any, path ...any) any {
	cur := doc
	for _, k := range path {
		switch k := k.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

// uncommentTLS removes the comment marks of the lines between "# BEGIN
// TLS" and "# END TLS" and puts tls's files in the place of the
// bootstrap's example paths.
func uncommentTLS(text string, tls EnvoyTLS) (string, error) {
	var out strings.Builder
	in, seen := false, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "# BEGIN TLS":
			in, seen = true, true
			continue
		case trimmed == "# END TLS":
			in = false
			continue
		case in:
			i := strings.Index(line, "# ")
			if i < 0 {
				return "", fmt.Errorf("%s: a line of the TLS block is not commented: %q", EnvoyBootstrap, line)
			}
			line = line[:i] + line[i+2:]
		}
		out.WriteString(line + "\n")
	}
	if !seen || in {
		return "", fmt.Errorf("%s: no TLS block between # BEGIN TLS and # END TLS", EnvoyBootstrap)
	}
	s := out.String()
	for _, r := range []struct{ old, new string }{
		{"/etc/cairn/tls/envoy.pem", tls.Cert},
		{"/etc/cairn/tls/envoy-key.pem", tls.Key},
		{"/etc/cairn/tls/cairn-ca.pem", tls.CA},
	} {
		if strings.Count(s, r.old) != 1 {
			return "", fmt.Errorf("%s: the TLS block names %s %d times, want once", EnvoyBootstrap, r.old, strings.Count(s, r.old))
		}
		s = strings.Replace(s, r.old, r.new, 1)
	}
	return s, nil
}
