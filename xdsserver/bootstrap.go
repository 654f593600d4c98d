package xdsserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
)

// BootstrapConfig names what a gRPC client's xDS bootstrap holds.
type BootstrapConfig struct {
	// Server is the xDS server's HOST:PORT (a server's --grpc-addr).
	Server string
	// NodeID identifies the client in the server's logs.
	NodeID string
	// Region and Zone place the client: its assignments put the
	// endpoints of its zone first, then of its region (SPEC §3's tiers).
	Region, Zone string
	// CAFile, when set, makes the channel TLS (gRFC A65's "tls"
	// channel credentials): the server's certificate is verified with
	// this CA bundle, for the host of Server. CertFile and KeyFile, when
	// set, are the client's certificate and key. grpc-go re-reads the
	// files as they change. Paths as the client sees them.
	CAFile, CertFile, KeyFile string
}

// Bootstrap returns the JSON bootstrap a grpc-go client reads (from the
// file named by GRPC_XDS_BOOTSTRAP, or GRPC_XDS_BOOTSTRAP_CONFIG itself)
// to resolve xds:///<svc>.<ns> through a cairn server. It asks for
// ignore_resource_deletion (gRFC A53): a cluster or listener missing from
// one response is kept rather than taken away (field notes X10).
func Bootstrap(c BootstrapConfig) ([]byte, error) {
	if _, _, err := net.SplitHostPort(c.Server); err != nil {
		return nil, fmt.Errorf("xdsserver: bootstrap: server %q is not HOST:PORT (a server's --grpc-addr)", c.Server)
	}
	if c.NodeID == "" {
		return nil, errors.New("xdsserver: bootstrap: node id is required")
	}
	type tlsFiles struct {
		CA   string `json:"ca_certificate_file"`
		Cert string `json:"certificate_file,omitempty"`
		Key  string `json:"private_key_file,omitempty"`
	}
	type creds struct {
		Type   string    `json:"type"`
		Config *tlsFiles `json:"config,omitempty"`
	}
	if (c.CertFile == "") != (c.KeyFile == "") || (c.CertFile != "" && c.CAFile == "") {
		return nil, errors.New("xdsserver: bootstrap: a client certificate needs its key and the CA file")
	}
	ch := creds{Type: "insecure"}
	if c.CAFile != "" {
		ch = creds{Type: "tls", Config: &tlsFiles{CA: c.CAFile, Cert: c.CertFile, Key: c.KeyFile}}
	}
	type server struct {
		URI      string   `json:"server_uri"`
		Creds    []creds  `json:"channel_creds"`
		Features []string `json:"server_features"`
	}
	type locality struct {
		Region string `json:"region,omitempty"`
		Zone   string `json:"zone,omitempty"`
	}
	type node struct {
		ID       string   `json:"id"`
		Locality locality `json:"locality"`
	}
	doc := struct {
		Servers []server `json:"xds_servers"`
		Node    node     `json:"node"`
	}{
		Servers: []server{{URI: c.Server, Creds: []creds{ch}, Features: []string{"xds_v3", "ignore_resource_deletion"}}},
		Node:    node{ID: c.NodeID, Locality: locality{Region: c.Region, Zone: c.Zone}},
	}
	return json.MarshalIndent(doc, "", "  ")
}
