package kube_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/cairn-sd/cairn/integration"
)

// manifestDir is deploy/kubernetes, from this package's folder.
const manifestDir = "../../deploy/kubernetes"

// resources maps the kinds the manifests hold to their API resources,
// and says which are namespaced.
var resources = map[string]struct {
	resource   string
	namespaced bool
}{
	"Namespace":           {"namespaces", false},
	"Service":             {"services", true},
	"ServiceAccount":      {"serviceaccounts", true},
	"PodDisruptionBudget": {"poddisruptionbudgets", true},
	"StatefulSet":         {"statefulsets", true},
	"Deployment":          {"deployments", true},
	"ClusterRole":         {"clusterroles", false},
	"ClusterRoleBinding":  {"clusterrolebindings", false},
}

// manifest is one document of a file of deploy/kubernetes.
type manifest struct {
	file string
	obj  runtime.Object
	gvk  schema.GroupVersionKind
}

func (m manifest) name() string {
	o := m.obj.(metav1.Object)
	return fmt.Sprintf("%s %s/%s (%s)", m.gvk.Kind, o.GetNamespace(), o.GetName(), m.file)
}

// readManifests decodes every document of deploy/kubernetes/*.yaml into
// its Kubernetes type, strictly: an unknown or misspelt field fails.
func readManifests(t *testing.T) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []manifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if err != nil {
				break
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", filepath.Base(f), i, err)
				continue
			}
			if _, ok := resources[gvk.Kind]; !ok {
				t.Errorf("%s, document %d: a %s, which this test does not know how to check", filepath.Base(f), i, gvk.Kind)
				continue
			}
			out = append(out, manifest{file: filepath.Base(f), obj: obj, gvk: *gvk})
		}
	}
	return out
}

// checkManifests: every manifest decodes into its type, and the API
// server accepts it (its Namespaces created, everything else a
// server-side dry run), then creates for real what kube-sync runs as:
// its ServiceAccount, ClusterRole and binding. The flags the manifests
// give cairn are flags of the binary.
func checkManifests(t *testing.T, k *integration.KubeAPI) {
	ms := readManifests(t)
	dyn, err := dynamic.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	create := func(m manifest, dry bool) error {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m.obj)
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{Object: u}
		obj.SetGroupVersionKind(m.gvk)
		r := resources[m.gvk.Kind]
		gvr := m.gvk.GroupVersion().WithResource(r.resource)
		opts := metav1.CreateOptions{FieldValidation: "Strict"}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if r.namespaced {
			ri = dyn.Resource(gvr).Namespace(obj.GetNamespace())
		}
		_, err = ri.Create(ctx, obj, opts)
		return err
	}
	kinds := map[string]int{}
	for _, m := range ms {
		kinds[m.gvk.Kind]++
		if m.gvk.Kind == "Namespace" {
			if err := create(m, false); err != nil {
				t.Fatalf("%s: %v", m.name(), err)
			}
		}
	}
	for _, m := range ms {
		if m.gvk.Kind == "Namespace" {
			continue
		}
		real := m.file == "kube-sync.yaml" && m.gvk.Kind != "Deployment"
		if err := create(m, !real); err != nil {
			t.Errorf("%s: the API server refused it: %v", m.name(), err)
		}
	}
	for kind, want := range map[string]int{"StatefulSet": 1, "PodDisruptionBudget": 1, "Deployment": 1, "ClusterRole": 2, "ClusterRoleBinding": 2} {
		if kinds[kind] != want {
			t.Errorf("%d %s in the manifests, want %d", kinds[kind], kind, want)
		}
	}
	checkFlags(t, ms)
}

// checkFlags runs the cairn binary's --help for each command the
// manifests run and checks every flag they give it is one it has.
func checkFlags(t *testing.T, ms []manifest) {
	bin, err := integration.Binary()
	if err != nil {
		t.Fatal(err)
	}
	help := func(args ...string) string {
		out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("cairn %s --help: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	global, server, kubeSync := help(), help("server"), help("kube-sync")
	flag := regexp.MustCompile(`(?:^|[\s"])(--[a-z][a-z-]*)`)
	for _, m := range ms {
		var spec []string
		switch o := m.obj.(type) {
		case *appsv1.StatefulSet:
			for _, c := range o.Spec.Template.Spec.Containers {
				spec = append(spec, c.Args...)
			}
			for _, s := range spec {
				for _, f := range flag.FindAllStringSubmatch(s, -1) {
					if !strings.Contains(server, f[1]+" ") && !strings.Contains(server, f[1]+"=") {
						t.Errorf("%s: cairn server has no flag %s", m.name(), f[1])
					}
				}
			}
		case *appsv1.Deployment:
			for _, c := range o.Spec.Template.Spec.Containers {
				i := slices.Index(c.Args, "kube-sync")
				if i < 0 {
					t.Fatalf("%s: its container does not run kube-sync", m.name())
				}
				for j, a := range c.Args {
					f, _, _ := strings.Cut(a, "=")
					in := kubeSync
					if j < i {
						in = global
					}
					if j != i && !strings.Contains(in, f+" ") && !strings.Contains(in, f+"=") {
						t.Errorf("%s: cairn has no flag %s where the manifest gives it", m.name(), f)
					}
				}
			}
		}
	}
}

// stripComments drops the lines that are only a comment.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
