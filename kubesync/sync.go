package kubesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

// Annotation selects a Service for sync when its value is "true".
const Annotation = "cairn.io/sync"

// Defaults of Config.
const (
	DefaultLeaseTTL  = 10 * time.Minute
	DefaultWriteRate = 50
)

// API is what kube-sync asks of cairn: a *client.Client with a registrar
// token for the namespaces synced.
type API interface {
	Services(ctx context.Context) ([]wire.ServiceSummary, error)
	Service(ctx context.Context, ns, svc string, opts ...client.ReadOption) (wire.ServiceDetail, error)
	Register(ctx context.Context, ns, svc string, reg wire.Registration) (wire.Registered, error)
	Renew(ctx context.Context, k wire.InstanceKey, inc uint64) (wire.Instance, error)
	ForceDrain(ctx context.Context, k wire.InstanceKey, inc uint64) (wire.Instance, error)
	Report(ctx context.Context, k wire.InstanceKey, inc uint64, ready bool, deps map[string]wire.DependencyState) (wire.Instance, error)
}

// Config configures a Sync.
type Config struct {
	// Kube is the Kubernetes API; API is cairn's. Both required.
	Kube kubernetes.Interface
	API  API
	// Cluster names this Kubernetes cluster in the registration ids
	// (kube-sync/CLUSTER/POD-UID): two clusters' kube-syncs never touch
	// each other's instances. Default "kubernetes".
	Cluster string
	// Region is the region registrations name; "" leaves it to the
	// server (its own).
	Region string
	// RegionFromNodes takes each pod's region from its node's
	// topology.kubernetes.io/region label instead (a Node informer; the
	// RBAC needs nodes get, list, watch). Not with Region.
	RegionFromNodes bool
	// Selector, if set, selects the Services whose labels match it,
	// beside those annotated cairn.io/sync: "true".
	Selector labels.Selector
	// Namespaces maps a Kubernetes namespace to the cairn namespace its
	// Services are registered in; one not listed keeps its name.
	Namespaces map[string]string
	// LeaseTTL is the lease registrations ask for; kube-sync renews it
	// while the pod is in the slices. Default 10m: a kube-sync gone for
	// that long leaves its instances to expire.
	LeaseTTL time.Duration
	// Resync is how often every service is reconciled whatever the
	// events said. Default the smaller of 1m and LeaseTTL/4.
	Resync time.Duration
	// WriteRate and WriteBurst bound the writes to cairn (per second, in
	// a burst): a burst of slice changes is spread out, never a flood at
	// the leader. Default 50 and 50.
	WriteRate  float64
	WriteBurst int
	// Workers reconcile services in parallel. Default 2.
	Workers int
	// Logger and Metrics default to discarding.
	Logger  *slog.Logger
	Metrics prometheus.Registerer
	// Now is the clock of lease renewals. Default time.Now.
	Now func() time.Time
}

// Sync runs the reconciliation.
type Sync struct {
	cfg     Config
	plan    Planner
	log     *slog.Logger
	limit   *rate.Limiter
	queue   workqueue.TypedRateLimitingInterface[wire.ServiceKey]
	svcs    corelisters.ServiceLister
	slices  discoverylisters.EndpointSliceLister
	synced  atomic.Bool
	metrics metrics

	mu       sync.Mutex
	skipped  map[wire.ServiceKey]Skipped
	conflict map[wire.ServiceKey]int
}

// New checks cfg and returns a Sync to Run.
func New(cfg Config) (*Sync, error) {
	if cfg.Kube == nil || cfg.API == nil {
		return nil, errors.New("kubesync: Config.Kube and Config.API are required")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "kubernetes"
	}
	if err := wire.CheckLabel("cluster", cfg.Cluster); err != nil {
		return nil, err
	}
	if cfg.Region != "" {
		if err := wire.CheckLabel("region", cfg.Region); err != nil {
			return nil, err
		}
		if cfg.RegionFromNodes {
			return nil, errors.New("kubesync: region and region-from-nodes: give one or the other, not both")
		}
	}
	for k, v := range cfg.Namespaces {
		if err := wire.CheckLabel("namespace-map", v); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", k, err)
		}
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.LeaseTTL < 30*time.Second || cfg.LeaseTTL > 24*time.Hour {
		return nil, fmt.Errorf("kubesync: lease-ttl %s is out of range 30s-24h", cfg.LeaseTTL)
	}
	if cfg.Resync == 0 {
		cfg.Resync = min(time.Minute, cfg.LeaseTTL/4)
	}
	if cfg.Resync < 0 || cfg.Resync > cfg.LeaseTTL/2 {
		return nil, fmt.Errorf("kubesync: resync %s must be positive and at most half the lease-ttl %s", cfg.Resync, cfg.LeaseTTL)
	}
	if cfg.WriteRate == 0 {
		cfg.WriteRate = DefaultWriteRate
	}
	if cfg.WriteBurst == 0 {
		cfg.WriteBurst = max(1, int(cfg.WriteRate))
	}
	if cfg.WriteRate < 0 || cfg.WriteBurst < 0 {
		return nil, errors.New("kubesync: write rate and burst must be positive")
	}
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sync{
		cfg:  cfg,
		plan: Planner{Owner: "kube-sync/" + cfg.Cluster + "/", Region: cfg.Region, LeaseTTL: cfg.LeaseTTL},
		log:  cfg.Logger, limit: rate.NewLimiter(rate.Limit(cfg.WriteRate), cfg.WriteBurst),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[wire.ServiceKey](),
			workqueue.TypedRateLimitingQueueConfig[wire.ServiceKey]{Name: "kube-sync"}),
		skipped: map[wire.ServiceKey]Skipped{}, conflict: map[wire.ServiceKey]int{},
	}
	s.metrics = newMetrics(cfg.Metrics, s)
	return s, nil
}

// Ready reports whether the informers have synced: before, kube-sync
// knows nothing of the slices and writes nothing.
func (s *Sync) Ready() bool { return s.synced.Load() }

// Run watches Services and EndpointSlices and reconciles until ctx ends.
func (s *Sync) Run(ctx context.Context) error {
	defer s.queue.ShutDown()
	f := informers.NewSharedInformerFactory(s.cfg.Kube, 0)
	svcInf := f.Core().V1().Services()
	sliceInf := f.Discovery().V1().EndpointSlices()
	s.svcs, s.slices = svcInf.Lister(), sliceInf.Lister()
	informers := map[string]cache.SharedIndexInformer{"services": svcInf.Informer(), "endpointslices": sliceInf.Informer()}
	if s.cfg.RegionFromNodes {
		nodeInf := f.Core().V1().Nodes()
		nodes := nodeInf.Lister()
		s.plan.NodeRegion = func(name string) string {
			if n, err := nodes.Get(name); err == nil {
				return n.Labels[corev1.LabelTopologyRegion]
			}
			return ""
		}
		// A node's region changed (rare): every service is looked at
		// again, as at a resync.
		if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, o any) {
				on, _ := old.(*corev1.Node)
				nn, _ := o.(*corev1.Node)
				if on != nil && nn != nil && on.Labels[corev1.LabelTopologyRegion] != nn.Labels[corev1.LabelTopologyRegion] {
					s.enqueueSelected()
				}
			},
			AddFunc: func(any) {
				if s.Ready() {
					s.enqueueSelected()
				}
			},
		}); err != nil {
			return err
		}
		informers["nodes"] = nodeInf.Informer()
	}
	if _, err := svcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.enqueueService(o) },
		UpdateFunc: func(_, o any) { s.enqueueService(o) },
		DeleteFunc: func(o any) { s.enqueueService(o) },
	}); err != nil {
		return err
	}
	if _, err := sliceInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.enqueueSlice(o) },
		UpdateFunc: func(_, o any) { s.enqueueSlice(o) },
		DeleteFunc: func(o any) { s.enqueueSlice(o) },
	}); err != nil {
		return err
	}
	// A list or watch refused (RBAC short of a verb) or cut is retried
	// by the informer; it is counted and logged here, where an
	// operator sees it, and not only in client-go's own log.
	for name, inf := range informers {
		if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			s.metrics.watchErrors.WithLabelValues(name).Inc()
			if ctx.Err() == nil {
				s.log.Warn("kube-sync: list or watch failed; retried", "resource", name, "err", err)
			}
		}); err != nil {
			return err
		}
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kubesync: the %v informer did not sync", typ)
		}
	}
	s.synced.Store(true)
	s.log.Info("kube-sync: informers synced", "cluster", s.cfg.Cluster)
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Go(func() {
			for s.next(ctx) {
			}
		})
	}
	wg.Go(func() { s.resyncLoop(ctx) })
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
	return nil
}

// resyncLoop enqueues every service each Resync, the first at once.
func (s *Sync) resyncLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Resync)
	defer t.Stop()
	for {
		s.resync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resync enqueues every service kube-sync may have a say in: those of
// the Services selected, and every service cairn lets its token read,
// where it may hold instances it registered for a Service since
// unselected or deleted.
func (s *Sync) resync(ctx context.Context) {
	s.enqueueSelected()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sums, err := s.cfg.API.Services(cctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("kube-sync: listing cairn's services", "err", err)
		}
		return
	}
	for _, sum := range sums {
		s.queue.Add(wire.ServiceKey{Namespace: sum.Namespace, Name: sum.Name})
	}
}

// enqueueSelected enqueues the service of every Service selected.
func (s *Sync) enqueueSelected() {
	svcs, err := s.svcs.List(labels.Everything())
	if err != nil {
		s.log.Warn("kube-sync: listing Services", "err", err)
	}
	for _, svc := range svcs {
		if s.selected(svc) {
			s.queue.Add(s.keyOf(svc.Namespace, svc.Name))
		}
	}
}

// selected reports whether svc is synced.
func (s *Sync) selected(svc *corev1.Service) bool {
	if svc.Annotations[Annotation] == "true" {
		return true
	}
	return s.cfg.Selector != nil && !s.cfg.Selector.Empty() && s.cfg.Selector.Matches(labels.Set(svc.Labels))
}

// keyOf is the cairn service a Kubernetes Service is synced to.
func (s *Sync) keyOf(ns, name string) wire.ServiceKey {
	if m, ok := s.cfg.Namespaces[ns]; ok {
		ns = m
	}
	return wire.ServiceKey{Namespace: ns, Name: name}
}

// namespacesOf are the Kubernetes namespaces whose Services go to the
// cairn namespace ns, in the order a name clash is settled: ns itself
// first (unless mapped elsewhere), then those mapped to it by name.
func (s *Sync) namespacesOf(ns string) []string {
	var out []string
	if _, moved := s.cfg.Namespaces[ns]; !moved {
		out = append(out, ns)
	}
	for k, v := range s.cfg.Namespaces {
		if v == ns && k != ns {
			out = append(out, k)
		}
	}
	if len(out) > 1 {
		slices.Sort(out[1:])
	}
	return out
}

func (s *Sync) enqueueService(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if svc, ok := o.(*corev1.Service); ok {
		s.queue.Add(s.keyOf(svc.Namespace, svc.Name))
	}
}

func (s *Sync) enqueueSlice(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if es, ok := o.(*discoveryv1.EndpointSlice); ok {
		if name := es.Labels[discoveryv1.LabelServiceName]; name != "" {
			s.queue.Add(s.keyOf(es.Namespace, name))
		}
	}
}

// next reconciles one service; false once the queue shuts down.
func (s *Sync) next(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	err := s.reconcile(ctx, key)
	switch {
	case err == nil:
		s.queue.Forget(key)
		s.metrics.reconciles.WithLabelValues("ok").Inc()
	case ctx.Err() != nil:
	default:
		s.metrics.reconciles.WithLabelValues("error").Inc()
		s.log.Warn("kube-sync: reconcile failed; retried with backoff", "service", key.String(), "err", err)
		s.queue.AddRateLimited(key)
	}
	return true
}

// reconcile brings cairn's instances of key to what the slices say.
func (s *Sync) reconcile(ctx context.Context, key wire.ServiceKey) error {
	var sources []Source
	for _, ns := range s.namespacesOf(key.Namespace) {
		svc, err := s.svcs.Services(ns).Get(key.Name)
		if apierrors.IsNotFound(err) || (err == nil && !s.selected(svc)) {
			continue
		}
		if err != nil {
			return err
		}
		sl, err := s.slices.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: key.Name}))
		if err != nil {
			return err
		}
		sources = append(sources, Source{Namespace: ns, Slices: sl})
	}
	detail, err := s.cfg.API.Service(ctx, key.Namespace, key.Name, client.Consistent())
	var ce *client.Error
	if errors.As(err, &ce) && (ce.Code == wire.CodeNotFound || ce.Code == wire.CodeDenied) {
		s.setSkipped(key, nil, 0)
		switch {
		case len(sources) == 0:
		case ce.Code == wire.CodeNotFound:
			// The definition is the operator's (cairn apply); until it
			// exists there is nothing to register into. Not an error
			// to back off from: the resync looks again.
			s.metrics.reconciles.WithLabelValues("undefined").Inc()
			s.log.Warn("kube-sync: Service selected but not defined in cairn (cairn apply it)", "service", key.String(),
				"kubernetes", sourceName(sources, key.Name))
		default:
			s.metrics.reconciles.WithLabelValues("denied").Inc()
			s.log.Warn("kube-sync: Service selected in a namespace kube-sync's token may not write (a registrar token of it is needed)",
				"service", key.String(), "kubernetes", sourceName(sources, key.Name), "err", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	want, skipped := Desired(detail.Definition, sources)
	actions, conflicts := s.plan.Plan(key, want, detail.View.Endpoints, s.cfg.Now())
	s.setSkipped(key, skipped, len(conflicts))
	for _, c := range conflicts {
		s.log.Warn("kube-sync: instance id held by another registrar; left alone", "service", key.String(), "instance", c.ID,
			"registrar", c.Registrar, "registration_id", c.RegistrationID)
	}
	for _, a := range actions {
		if err := s.limit.Wait(ctx); err != nil {
			return err
		}
		result, err := s.do(ctx, a)
		s.metrics.writes.WithLabelValues(a.Op.String(), result).Inc()
		switch result {
		case "ok":
			s.log.Info("kube-sync: "+a.Op.String(), "instance", a.Key.String(), "why", a.Why)
		case "error":
			// cairn is failing (no leader, unreachable, a bad token):
			// the rest of this plan waits for the next round, planned
			// afresh after the backoff, rather than each write spending
			// the client's retries on a plan growing stale.
			return fmt.Errorf("%s %s: %w", a.Op, a.Key, err)
		default:
			// Refused for good: a late write fenced by a newer
			// incarnation, an instance gone meanwhile, an address the
			// namespace's policy forbids. The next round reads again.
			s.log.Warn("kube-sync: "+a.Op.String()+" refused", "instance", a.Key.String(), "why", a.Why, "result", result, "err", err)
		}
	}
	return nil
}

// do performs a, and says how it went: ok, error (worth a retry), or
// the code of a refusal.
func (s *Sync) do(ctx context.Context, a Action) (string, error) {
	var err error
	switch a.Op {
	case OpRegister:
		_, err = s.cfg.API.Register(ctx, a.Key.Namespace, a.Key.Service, a.Registration)
	case OpReport:
		_, err = s.cfg.API.Report(ctx, a.Key, a.Incarnation, a.Ready, nil)
	case OpRenew:
		_, err = s.cfg.API.Renew(ctx, a.Key, a.Incarnation)
	case OpDrain:
		// Kubernetes has decided: the pod is going, past its own
		// disruption budget. cairn's budget cannot keep it; the drain
		// goes through and the override is audited.
		_, err = s.cfg.API.ForceDrain(ctx, a.Key, a.Incarnation)
	}
	if err == nil {
		return "ok", nil
	}
	// A refusal of this write (4xx) is final for it; anything else (no
	// leader, 5xx, the network, a token cairn does not know or no
	// longer allows) is cairn failing, retried with backoff.
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 &&
		ce.Status != http.StatusTooManyRequests && ce.Status != http.StatusUnauthorized && ce.Code != wire.CodeDenied {
		return ce.Code, err
	}
	return "error", err
}

// setSkipped records what the last round of key skipped.
func (s *Sync) setSkipped(key wire.ServiceKey, sk Skipped, conflicts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(sk) == 0 {
		delete(s.skipped, key)
	} else {
		s.skipped[key] = sk
	}
	if conflicts == 0 {
		delete(s.conflict, key)
	} else {
		s.conflict[key] = conflicts
	}
}
