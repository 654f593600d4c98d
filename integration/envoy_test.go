package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cairn-sd/cairn/wire"
)

// The Envoy tests check deploy/envoy/envoy.yaml. Envoy cannot be
// installed here, so the file is read as Envoy reads it — YAML to JSON
// to its bootstrap proto, unknown fields refused — and checked with the
// protoc-gen-validate rules Envoy applies, then with the rules Envoy
// enforces at start-up and the facts about cairn it depends on.
//
// The typed extensions the bootstrap names (the HTTP connection manager,
// the router, the upstream HTTP protocol options) are imported above by
// name; importing them registers their types, and protojson resolves an
// "@type" only through that registry.

const (
	envoyBootstrapPath = "../deploy/envoy/envoy.yaml"
	// grpcDefaultAddr is `cairn server --grpc-addr`'s default;
	// TestEnvoyBootstrapAgainstCairn checks it against the binary.
	grpcDefaultAddr = "127.0.0.1:8481"

	clusterTypeURL    = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	assignmentTypeURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// loadEnvoyBootstrap reads the bootstrap as Envoy would and validates it,
// typed extensions included.
func loadEnvoyBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := readEnvoyBootstrap(envoyBootstrapPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readEnvoyBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parsing %s as YAML: %w", path, err)
	}
	doc, err = jsonable(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s as JSON: %w", path, err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("%s is not an Envoy v3 bootstrap: %w", path, err)
	}
	if err := validateDeep(b); err != nil {
		return nil, fmt.Errorf("%s breaks Envoy's validation rules: %w", path, err)
	}
	return b, nil
}

// jsonable turns what yaml.v3 decodes into what encoding/json encodes:
// mappings with string keys only (as in JSON, and as Envoy requires).
func jsonable(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			j, err := jsonable(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			v[k] = j
		}
		return v, nil
	case map[any]any:
		return nil, fmt.Errorf("a mapping with a key that is not a string: %v", v)
	case []any:
		for i, e := range v {
			j, err := jsonable(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			v[i] = j
		}
		return v, nil
	default:
		return v, nil
	}
}

// validateDeep runs m's protoc-gen-validate rules (ValidateAll), and
// those of every message packed in an Any inside it, which ValidateAll
// does not open.
func validateDeep(m proto.Message) error {
	v, ok := m.(interface{ ValidateAll() error })
	if !ok {
		return fmt.Errorf("%s has no validation rules", m.ProtoReflect().Descriptor().FullName())
	}
	if err := v.ValidateAll(); err != nil {
		return err
	}
	var errs []error
	walkAnys(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("opening %s: %w", a.GetTypeUrl(), err))
			return
		}
		if err := validateDeep(inner); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
		}
	})
	return errors.Join(errs...)
}

// walkAnys calls f with each Any in m, outermost first, without
// descending into them (f does).
func walkAnys(m protoreflect.Message, f func(*anypb.Any)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		f(a)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
					walkAnys(e.Message(), f)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := range v.List().Len() {
					walkAnys(v.List().Get(i).Message(), f)
				}
			}
		case fd.Message() != nil:
			walkAnys(v.Message(), f)
		}
		return true
	})
}

// demoService returns deploy/demo.yaml's namespace and name, and the
// clusters cairn makes of it: "<svc>.<ns>:<port name>" per port (SPEC §4).
func demoService(t *testing.T) (ns, name string, clusters []string) {
	t.Helper()
	raw, err := os.ReadFile("../deploy/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var def struct {
		Namespace string `yaml:"namespace"`
		Name      string `yaml:"name"`
		Ports     []struct {
			Name string `yaml:"name"`
		} `yaml:"ports"`
	}
	if err := yaml.Unmarshal(raw, &def); err != nil {
		t.Fatalf("deploy/demo.yaml: %v", err)
	}
	for _, p := range def.Ports {
		clusters = append(clusters, def.Name+"."+def.Namespace+":"+p.Name)
	}
	if def.Namespace == "" || def.Name == "" || len(clusters) == 0 {
		t.Fatalf("deploy/demo.yaml: namespace %q, name %q, %d ports", def.Namespace, def.Name, len(clusters))
	}
	return def.Namespace, def.Name, clusters
}

// envoyRoute returns the listener's connection manager and the cluster
// its one route sends to.
func envoyRoute(t *testing.T, b *bootstrapv3.Bootstrap) (*hcmv3.HttpConnectionManager, string) {
	t.Helper()
	ls := b.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 || len(ls[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("want one static listener with one filter chain of one filter; got %d listeners", len(ls))
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("the listener's filter is not an HttpConnectionManager: %v", err)
	}
	vhs := hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 || len(vhs[0].GetRoutes()) != 1 {
		t.Fatalf("want an inline route configuration with one virtual host of one route; got %v", hcm.GetRouteConfig())
	}
	cluster := vhs[0].GetRoutes()[0].GetRoute().GetCluster()
	if cluster == "" {
		t.Fatalf("the route names no cluster: %v", vhs[0].GetRoutes()[0])
	}
	return hcm, cluster
}

// TestEnvoyBootstrap checks deploy/envoy/envoy.yaml without a server: it
// is a valid Envoy v3 bootstrap, and it holds what Envoy needs at start-up
// to take clusters and endpoints from cairn over delta ADS and route to
// the demo service.
func TestEnvoyBootstrap(t *testing.T) {
	b := loadEnvoyBootstrap(t)

	t.Run("node has id, cluster and locality", func(t *testing.T) {
		// Envoy refuses an ADS subscription without node id and cluster;
		// cairn picks tiers from the locality.
		n := b.GetNode()
		if n.GetId() == "" || n.GetCluster() == "" {
			t.Errorf("node id %q, cluster %q: Envoy needs both for ADS", n.GetId(), n.GetCluster())
		}
		if n.GetLocality().GetRegion() == "" || n.GetLocality().GetZone() == "" {
			t.Errorf("node locality %v: want a region and a zone (they pick cairn's tiers)", n.GetLocality())
		}
	})

	t.Run("admin on loopback", func(t *testing.T) {
		a := b.GetAdmin().GetAddress().GetSocketAddress()
		if ip := net.ParseIP(a.GetAddress()); ip == nil || !ip.IsLoopback() {
			t.Errorf("admin address %v: want loopback", a)
		}
	})

	t.Run("delta ADS v3 to the cairn cluster", func(t *testing.T) {
		ads := b.GetDynamicResources().GetAdsConfig()
		if ads.GetApiType() != corev3.ApiConfigSource_DELTA_GRPC || ads.GetTransportApiVersion() != corev3.ApiVersion_V3 {
			t.Errorf("ads_config: api_type %v, transport_api_version %v; want DELTA_GRPC, V3", ads.GetApiType(), ads.GetTransportApiVersion())
		}
		if !ads.GetSetNodeOnFirstMessageOnly() {
			t.Error("ads_config: set_node_on_first_message_only is off")
		}
		gs := ads.GetGrpcServices()
		if len(gs) != 1 || gs[0].GetEnvoyGrpc().GetClusterName() == "" {
			t.Fatalf("ads_config: want one envoy_grpc service; got %v", gs)
		}
		name := gs[0].GetEnvoyGrpc().GetClusterName()
		var c *clusterv3.Cluster
		for _, sc := range b.GetStaticResources().GetClusters() {
			if sc.GetName() == name {
				c = sc
			}
		}
		if c == nil {
			t.Fatalf("ads_config names cluster %q; no static cluster has that name", name)
		}
		if c.GetConnectTimeout().AsDuration() <= 0 {
			t.Errorf("cluster %q: connect_timeout %v", name, c.GetConnectTimeout())
		}
		// gRPC needs HTTP/2 to the server.
		opts := &upstreamhttpv3.HttpProtocolOptions{}
		packed := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		if packed == nil {
			t.Fatalf("cluster %q: no envoy.extensions.upstreams.http.v3.HttpProtocolOptions; gRPC needs HTTP/2", name)
		}
		if err := packed.UnmarshalTo(opts); err != nil {
			t.Fatalf("cluster %q: protocol options: %v", name, err)
		}
		if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			t.Errorf("cluster %q: protocol options %v; want explicit HTTP/2", name, opts)
		}
		// The endpoint is cairn's default --grpc-addr.
		var addrs []string
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			for _, e := range le.GetLbEndpoints() {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				addrs = append(addrs, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
			}
		}
		if !slices.Equal(addrs, []string{grpcDefaultAddr}) {
			t.Errorf("cluster %q: endpoints %v; want cairn's default --grpc-addr %s", name, addrs, grpcDefaultAddr)
		}
	})

	t.Run("clusters over ADS, listeners not from cairn", func(t *testing.T) {
		dr := b.GetDynamicResources()
		if dr.GetCdsConfig().GetAds() == nil || dr.GetCdsConfig().GetResourceApiVersion() != corev3.ApiVersion_V3 {
			t.Errorf("cds_config %v: want ads with resource_api_version V3", dr.GetCdsConfig())
		}
		if dr.GetLdsConfig() != nil || dr.GetLdsResourcesLocator() != "" {
			t.Errorf("the bootstrap takes listeners from %v%s: cairn's listeners are gRPC API listeners, not for Envoy",
				dr.GetLdsConfig(), dr.GetLdsResourcesLocator())
		}
	})

	t.Run("listener routes to a demo cluster", func(t *testing.T) {
		ls := b.GetStaticResources().GetListeners()
		hcm, cluster := envoyRoute(t, b)
		if ip := net.ParseIP(ls[0].GetAddress().GetSocketAddress().GetAddress()); ip == nil || !ip.IsLoopback() {
			t.Errorf("listener address %v: want loopback", ls[0].GetAddress())
		}
		if _, _, want := demoService(t); !slices.Contains(want, cluster) {
			t.Errorf("the route sends to %q; cairn names deploy/demo.yaml's clusters %v", cluster, want)
		}
		// A static route to a cluster that only CDS brings is refused at
		// start-up unless validate_clusters is explicitly false.
		if vc := hcm.GetRouteConfig().GetValidateClusters(); vc == nil || vc.GetValue() {
			t.Errorf("route_config validate_clusters %v: want false, or Envoy refuses a route to a cluster from CDS", vc)
		}
		fs := hcm.GetHttpFilters()
		if len(fs) == 0 || !fs[len(fs)-1].GetTypedConfig().MessageIs(&routerv3.Router{}) {
			t.Errorf("http_filters %v: the last must be the router", fs)
		}
	})
}

// TestEnvoyBootstrapBreaks checks that the loading above fails on what
// Envoy would refuse: an unknown field, an unknown typed extension, a
// broken validation rule, including inside a typed extension.
func TestEnvoyBootstrapBreaks(t *testing.T) {
	raw, err := os.ReadFile(envoyBootstrapPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"unknown field", "set_node_on_first_message_only:", "set_node_on_first_msg_only:"},
		{"unknown typed extension", "extensions.filters.http.router.v3.Router", "extensions.filters.http.router.v3.Routr"},
		{"validation rule", "port_value: 9901", "port_value: 99999"},
		{"validation rule in a typed extension", "stat_prefix: demo_web", "stat_prefix: \"\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := bytes.Replace(raw, []byte(tc.old), []byte(tc.new), 1)
			if bytes.Equal(broken, raw) {
				t.Fatalf("%s does not contain %q", envoyBootstrapPath, tc.old)
			}
			path := filepath.Join(t.TempDir(), "envoy.yaml")
			if err := os.WriteFile(path, broken, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := readEnvoyBootstrap(path); err == nil {
				t.Errorf("%q → %q: loaded without error", tc.old, tc.new)
			} else {
				t.Logf("refused as expected: %v", err)
			}
		})
	}
}

// TestEnvoyBootstrapAgainstCairn checks the bootstrap's facts about cairn
// on a real server: the ADS address is the binary's default --grpc-addr,
// the cluster the listener routes to is one a --dev server with
// deploy/demo.yaml applied serves over delta ADS to a node like the
// bootstrap's, and its assignment comes on the same stream, with the
// endpoints in the node's zone at priority 0 and those in its region's
// other zone at 1.
func TestEnvoyBootstrapAgainstCairn(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	b := loadEnvoyBootstrap(t)
	_, route := envoyRoute(t, b)

	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command(bin, "server", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("cairn server --help: %v\n%s", err, help)
	}
	m := regexp.MustCompile(`--grpc-addr value .*\(default: "([^"]*)"\)`).FindSubmatch(help)
	if m == nil {
		t.Fatalf("cairn server --help shows no --grpc-addr default:\n%s", help)
	}
	if string(m[1]) != grpcDefaultAddr {
		t.Errorf("cairn server --help: --grpc-addr defaults to %s; deploy/envoy/envoy.yaml and this test assume %s", m[1], grpcDefaultAddr)
	}
	ns, svc, demo := demoService(t)

	c := StartCluster(t, 1, "--dev")
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	def, err := os.ReadFile("../deploy/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	applyDefinition(ctx, t, c, string(def))
	// One instance in the node's zone, one in another zone of its region,
	// each answering the demo's HTTP check.
	loc := b.GetNode().GetLocality()
	other := loc.GetZone() + "-other"
	places := map[string]string{} // address → zone
	for i, zone := range []string{loc.GetZone(), other} {
		ip := fmt.Sprintf("127.0.0.%d", 71+i)
		port := httpListener(t, ip)
		places[net.JoinHostPort(ip, strconv.Itoa(port))] = zone
		reg := wire.Registration{ID: fmt.Sprintf("envoy-%d", i), Addresses: []string{ip}, Ports: map[string]int{"http": port},
			Region: loc.GetRegion(), Zone: zone}
		onAnyNode(t, c, "register "+reg.ID, func(n *Node) error {
			_, err := n.Client().Register(ctx, ns, svc, reg)
			return err
		})
	}

	cc, err := grpc.NewClient(n.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })

	// What Envoy sends first: the node, and CDS with no names (the
	// wildcard). A stream opened before the server's table is built is
	// refused with UNAVAILABLE, which Envoy retries; so does the test.
	node := proto.Clone(b.GetNode()).(*corev3.Node)
	// Streams end with this context; the wait for the assignment below
	// is bounded by it.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	var resp *discoveryv3.DeltaDiscoveryResponse
	Eventually(t, 30*time.Second, func() error {
		s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(sctx)
		if err != nil {
			return err
		}
		if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: clusterTypeURL}); err != nil {
			return err
		}
		r, err := s.Recv()
		if status.Code(err) == codes.Unavailable {
			return err
		}
		if err != nil {
			return &stopPolling{fmt.Errorf("CDS over delta ADS: %w", err)}
		}
		stream, resp = s, r
		return nil
	})
	send := func(req *discoveryv3.DeltaDiscoveryRequest) {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatalf("sending %s: %v", req.GetTypeUrl(), err)
		}
	}
	// The first answer may come from a table older than the demo service;
	// as Envoy does, keep what each response adds and removes, and
	// acknowledge it, until every cluster of deploy/demo.yaml is there.
	served := map[string]*clusterv3.Cluster{}
	for {
		if resp.GetTypeUrl() != clusterTypeURL {
			t.Fatalf("a response of type %s before any request for it", resp.GetTypeUrl())
		}
		for _, r := range resp.GetResources() {
			c := &clusterv3.Cluster{}
			if err := r.GetResource().UnmarshalTo(c); err != nil {
				t.Fatalf("cluster %q: %v", r.GetName(), err)
			}
			served[r.GetName()] = c
		}
		for _, name := range resp.GetRemovedResources() {
			delete(served, name)
		}
		send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: clusterTypeURL, ResponseNonce: resp.GetNonce()})
		if !slices.ContainsFunc(demo, func(name string) bool { return served[name] == nil }) {
			break
		}
		if resp, err = stream.Recv(); err != nil {
			t.Fatalf("waiting for deploy/demo.yaml's clusters %v; cairn serves %v, and then: %v", demo, slices.Sorted(maps.Keys(served)), err)
		}
	}
	if served[route] == nil {
		t.Fatalf("deploy/envoy/envoy.yaml routes to %q; cairn serves the clusters %v", route, slices.Sorted(maps.Keys(served)))
	}
	routed := served[route]
	if routed.GetType() != clusterv3.Cluster_EDS || routed.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Fatalf("cluster %q: want EDS over ADS (the bootstrap's stream); got %v", route, routed)
	}

	// Envoy asks for the cluster's assignment on the same stream; each
	// later response is acknowledged too.
	eds := routed.GetEdsClusterConfig().GetServiceName()
	if eds == "" {
		eds = route
	}
	send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: assignmentTypeURL, ResourceNamesSubscribe: []string{eds}})
	want := map[string]uint32{} // address → priority: the node's zone first
	for addr, zone := range places {
		want[addr] = 1
		if zone == loc.GetZone() {
			want[addr] = 0
		}
	}
	var last map[string]uint32
	for !maps.Equal(last, want) {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for %s's assignment with %v (address → priority); last had %v: %v", eds, want, last, err)
		}
		send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
		for _, res := range r.GetResources() {
			if res.GetName() != eds {
				continue
			}
			cla := &endpointv3.ClusterLoadAssignment{}
			if err := res.GetResource().UnmarshalTo(cla); err != nil {
				t.Fatalf("assignment %q: %v", eds, err)
			}
			last = map[string]uint32{}
			for _, le := range cla.GetEndpoints() {
				for _, e := range le.GetLbEndpoints() {
					sa := e.GetEndpoint().GetAddress().GetSocketAddress()
					last[net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))] = le.GetPriority()
				}
			}
		}
	}
}
