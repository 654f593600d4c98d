package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cairn-sd/cairn/cmd/internal/daemon"
	"github.com/cairn-sd/cairn/kubesync"
)

// kubeSyncCommand is cairn kube-sync: registrations reconciled from
// Kubernetes EndpointSlices (package kubesync).
func kubeSyncCommand() *cli.Command {
	return &cli.Command{
		Name:  "kube-sync",
		Usage: "register the pods behind Kubernetes Services in cairn, from their EndpointSlices (run it in the cluster, with a registrar --token)",
		Description: "Watches Services and EndpointSlices and reconciles cairn's registrations with them through the API (--addr, --token: " +
			"a registrar token of the namespaces synced). A Service is synced when annotated " + kubesync.Annotation + `: "true", or when its ` +
			"labels match --selector; its cairn service (same name, in the namespace --namespace-map gives) must be defined (cairn apply). " +
			"Each ready or serving pod is an instance (id: the pod's name; registration id: kube-sync/CLUSTER/POD-UID, so a pod replaced " +
			"under the same name fences its predecessor); a terminating or vanished one is drained; one that turns unready is a self-report " +
			"of not ready. Only instances it registered are ever touched. /metrics, /healthz and /readyz (synced) on --http-addr.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, DefaultText: "in-cluster credentials", Usage: "kubeconfig file of the cluster to watch"},
			&cli.StringFlag{Name: "cluster", Required: true, Usage: "this cluster's name in the registration ids (a DNS label), unique among the clusters that sync to one cairn: a kube-sync touches only its own cluster's instances"},
			&cli.StringFlag{Name: "region", DefaultText: "the server's", Usage: "the region the instances are registered in (a DNS label)"},
			&cli.BoolFlag{Name: "region-from-nodes", Usage: "take each pod's region from its node's topology.kubernetes.io/region label instead of --region (reads Nodes: kube-sync.yaml's cairn-kube-sync-nodes ClusterRole)"},
			&cli.StringFlag{Name: "selector", Usage: "a label selector (app=web,tier!=batch): Services whose labels match are synced too, beside those annotated " + kubesync.Annotation},
			&cli.StringSliceFlag{Name: "namespace-map", Usage: "K8S=CAIRN: register the Services of Kubernetes namespace K8S in cairn namespace CAIRN (repeatable; one not listed keeps its name)"},
			&cli.DurationFlag{Name: "lease-ttl", Value: kubesync.DefaultLeaseTTL, Usage: "the lease the instances are registered with, renewed while their pods are in the slices; 30s-24h"},
			&cli.DurationFlag{Name: "resync", DefaultText: "the smaller of 1m and lease-ttl/4", Usage: "how often every service is reconciled, events or not"},
			&cli.Float64Flag{Name: "write-rate", Value: kubesync.DefaultWriteRate, Usage: "writes to cairn per second, at most (a burst of slice changes is spread out)"},
			&cli.IntFlag{Name: "write-burst", DefaultText: "write-rate", Usage: "writes to cairn in a burst, at most"},
			&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:8491", Usage: "address of /metrics, /healthz and /readyz"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Action: runKubeSync,
	}
}

// runKubeSync wires kube-sync: the Kubernetes client, cairn's, and the
// HTTP listener of its metrics and probes.
func runKubeSync(c *cli.Context) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return usage("--log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	var sel labels.Selector
	if s := c.String("selector"); s != "" {
		var err error
		if sel, err = labels.Parse(s); err != nil {
			return usage("--selector: %v", err)
		}
	}
	nsMap := map[string]string{}
	for _, kv := range c.StringSlice("namespace-map") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return usage("--namespace-map: %q is not K8S=CAIRN", kv)
		}
		if _, dup := nsMap[k]; dup {
			return usage("--namespace-map: namespace %s is mapped twice", k)
		}
		nsMap[k] = v
	}
	kc, err := clientcmd.BuildConfigFromFlags("", c.String("kubeconfig"))
	if err != nil {
		return usage("--kubeconfig: %v", err)
	}
	kc.UserAgent = "cairn-kube-sync"
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return usage("--kubeconfig: %v", err)
	}
	api, err := apiClient(c)
	if err != nil {
		return err
	}
	defer api.Close()
	reg := daemon.NewRegistry()
	s, err := kubesync.New(kubesync.Config{
		Kube: kube, API: api, Cluster: c.String("cluster"), Region: c.String("region"), RegionFromNodes: c.Bool("region-from-nodes"),
		Selector: sel, Namespaces: nsMap,
		LeaseTTL: c.Duration("lease-ttl"), Resync: c.Duration("resync"), WriteRate: c.Float64("write-rate"),
		WriteBurst: c.Int("write-burst"), Logger: log, Metrics: reg,
	})
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	ln, err := net.Listen("tcp", c.String("http-addr"))
	if err != nil {
		return fmt.Errorf("listening for HTTP on %q: %w", c.String("http-addr"), err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			http.Error(w, "not synced: the Service and EndpointSlice informers have not listed yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := daemon.NewHTTPServer(mux, log)
	log.Info("cairn kube-sync started", "cairn", api.Hostname(), "kubernetes", kc.Host, "cluster", c.String("cluster"),
		"http", ln.Addr().String(), "namespace_map", nsMap, "selector", c.String("selector"))
	g, ctx := errgroup.WithContext(c.Context)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return srv.Shutdown(context.Background())
	})
	g.Go(func() error { return s.Run(ctx) })
	return g.Wait()
}
