package integration

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// installKube is the script that builds the kube-apiserver and etcd the
// kube-sync tests run, and pins their versions.
const installKube = "scripts/install-kube.sh"

// KubeBinaries returns the kube-apiserver and etcd to run:
// $CAIRN_KUBE_APISERVER and $CAIRN_ETCD if set; else those
// scripts/install-kube.sh builds, in
// ${XDG_CACHE_HOME:-~/.cache}/cairn/kube, named by the versions it pins.
// The error says how to get them.
func KubeBinaries() (apiserver, etcd string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", "", err
	}
	b, err := os.ReadFile(filepath.Join(root, installKube))
	if err != nil {
		return "", "", err
	}
	pin := func(name string) string {
		if m := regexp.MustCompile(`(?m)^` + name + `=(v[0-9.]+)$`).FindSubmatch(b); m != nil {
			return string(m[1])
		}
		return ""
	}
	kv, ev := pin("KUBE_VERSION"), pin("ETCD_VERSION")
	if kv == "" || ev == "" {
		return "", "", fmt.Errorf("integration: %s pins no KUBE_VERSION or ETCD_VERSION", installKube)
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", err
		}
		cache = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(cache, "cairn", "kube")
	apiserver = cmp.Or(os.Getenv("CAIRN_KUBE_APISERVER"), filepath.Join(dir, "kube-apiserver-"+kv))
	etcd = cmp.Or(os.Getenv("CAIRN_ETCD"), filepath.Join(dir, "etcd-"+ev))
	for _, bin := range []string{apiserver, etcd} {
		if st, err := os.Stat(bin); err != nil || st.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("no %s (kube-apiserver %s and etcd %s, built from the Go module proxy by %s, ~6 min once)", bin, kv, ev, installKube)
		}
	}
	return apiserver, etcd, nil
}

// KubeAPI is a real kube-apiserver with its etcd, on loopback, for a
// test: no controller runs beside it, so a test writes the
// EndpointSlices a controller would.
type KubeAPI struct {
	// Kubeconfig is a kubeconfig file for the admin (system:masters);
	// KubeconfigFor(user) makes one for another user of the token file.
	Kubeconfig string
	// Client is the admin's, from Config.
	Client kubernetes.Interface
	Config *rest.Config
	// URL is the API server's, https://127.0.0.1:PORT.
	URL string

	dir    string
	tokens map[string]string // user → token
	etcd   proc
	api    proc
}

// KubeUsers are the users StartKubeAPI's token file knows besides the
// admin, and the groups they are in.
var KubeUsers = map[string][]string{
	// The identity kube-sync's ServiceAccount has in a cluster
	// (deploy/kubernetes/kube-sync.yaml binds its ClusterRole to it).
	"system:serviceaccount:cairn-system:cairn-kube-sync": {"system:serviceaccounts", "system:serviceaccounts:cairn-system"},
}

// StartKubeAPI starts etcd and a kube-apiserver with RBAC on, its users
// those of a token file (an admin in system:masters, and KubeUsers),
// and stops them when the test ends (their logs printed if it failed).
// It skips (fails under CI=true) when the binaries are not built.
func StartKubeAPI(t testing.TB) *KubeAPI {
	t.Helper()
	apiserver, etcd, err := KubeBinaries()
	if err != nil {
		Missing(t, "a real kube-apiserver", err.Error())
	}
	logf := func(format string, args ...any) {
		t.Logf("%s harness: %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	k := &KubeAPI{dir: t.TempDir(), tokens: map[string]string{}}
	k.etcd = proc{name: "etcd", LogPath: filepath.Join(k.dir, "etcd.log"), logf: logf}
	k.api = proc{name: "kube-apiserver", LogPath: filepath.Join(k.dir, "kube-apiserver.log"), logf: logf}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver log:\n%s\netcd log:\n%s", k.api.Tail(40), k.etcd.Tail(20))
		}
		k.api.Kill()
		k.etcd.Kill()
	})
	if err := k.start(apiserver, etcd); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *KubeAPI) start(apiserver, etcd string) error {
	ports, err := FreePorts(3)
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := k.etcd.start(etcd, []string{"--name", "default", "--data-dir", filepath.Join(k.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default=" + peer,
		"--unsafe-no-fsync", "--log-level", "warn"}, client); err != nil {
		return err
	}
	// The token file: token,user,uid,"group1,group2".
	var lines []byte
	add := func(user string, groups ...string) {
		tok := rand.Text()
		k.tokens[user] = tok
		lines = fmt.Appendf(lines, "%s,%s,%s,%q\n", tok, user, user, strings.Join(groups, ","))
	}
	add("admin", "system:masters")
	for u, gs := range KubeUsers {
		add(u, gs...)
	}
	tokens := filepath.Join(k.dir, "tokens.csv")
	if err := os.WriteFile(tokens, lines, 0o600); err != nil {
		return err
	}
	// The key ServiceAccount tokens would be signed with: required,
	// though no test uses one.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	saKey, saPub := filepath.Join(k.dir, "sa.key"), filepath.Join(k.dir, "sa.pub")
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	k.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if err := k.api.start(apiserver, []string{"--etcd-servers", client, "--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports[2]), "--cert-dir", filepath.Join(k.dir, "certs"),
		"--token-auth-file", tokens, "--authorization-mode", "RBAC",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-cluster-ip-range", "10.96.0.0/16",
		"--disable-admission-plugins", "ServiceAccount", "--v", "0"}, k.URL); err != nil {
		return err
	}
	if err := k.awaitReady(90 * time.Second); err != nil {
		return err
	}
	if k.Kubeconfig, err = k.KubeconfigFor("admin"); err != nil {
		return err
	}
	if k.Config, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig); err != nil {
		return err
	}
	k.Client, err = kubernetes.NewForConfig(k.Config)
	return err
}

// awaitReady polls /readyz until the server says ok.
func (k *KubeAPI) awaitReady(timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	start := time.Now()
	if err := awaitOK(hc, k.URL+"/readyz", k.tokens["admin"], timeout, &k.api, &k.etcd); err != nil {
		return fmt.Errorf("kube-apiserver not ready: %w\n%s", err, k.api.Tail(30))
	}
	k.api.logf("kube-apiserver ready in %s", time.Since(start).Round(10*time.Millisecond))
	return nil
}

// awaitOK polls url with hc (token, if any, as a bearer) until it
// answers 200 OK, as long as every one of procs runs.
func awaitOK(hc *http.Client, url, token string, timeout time.Duration, procs ...*proc) error {
	defer hc.CloseIdleConnections()
	return Poll(timeout, 50*time.Millisecond, func() error {
		for _, p := range procs {
			if !p.Running() {
				return StopPolling(fmt.Errorf("%s exited: %s\n%s", p.name, p.state(), p.Tail(30)))
			}
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			return StopPolling(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}

// KubeconfigFor writes a kubeconfig for user (admin, or one of
// KubeUsers) and returns its path. The server's certificate is its own
// self-signed one: the kubeconfig skips verifying it (loopback only).
func (k *KubeAPI) KubeconfigFor(user string) (string, error) {
	tok, ok := k.tokens[user]
	if !ok {
		return "", errors.New("integration: no kube user " + user)
	}
	path := filepath.Join(k.dir, "kubeconfig-"+regexp.MustCompile(`[^a-z0-9-]`).ReplaceAllString(user, "-"))
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: %q
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: %q}
current-context: test
`, k.URL, user, tok, user)
	return path, os.WriteFile(path, []byte(body), 0o600)
}

// KubeSync is a cairn kube-sync process.
type KubeSync struct {
	proc
	// HTTPAddr serves its /metrics, /healthz and /readyz.
	HTTPAddr string
	bin      string
	args     []string
}

// StartKubeSync runs `cairn kube-sync` against c's first node with
// token (a registrar's), kubeconfig and args, waits until it says it
// has synced, and kills it when the test ends (its log printed if the
// test failed).
func StartKubeSync(t testing.TB, c *Cluster, token, kubeconfig string, args ...string) *KubeSync {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ks := &KubeSync{HTTPAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), bin: bin}
	ks.proc = proc{name: "kube-sync", LogPath: filepath.Join(t.TempDir(), "kube-sync.log"), logf: c.cfg.Logf}
	n := c.Nodes[0]
	scheme := "http://"
	if c.TLS != nil {
		scheme = "https://"
	}
	ks.args = append([]string{"--addr", scheme + n.HTTPAddr, "--token", token}, c.cliTLSArgs()...)
	ks.args = append(ks.args, "kube-sync", "--kubeconfig", kubeconfig, "--http-addr", ks.HTTPAddr, "--log-level", "debug")
	ks.args = append(ks.args, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-sync log:\n%s", ks.Tail(80))
		}
		if ks.Running() {
			ks.Kill()
		}
	})
	if err := ks.Start(); err != nil {
		t.Fatal(err)
	}
	return ks
}

// Start starts the process again with the same flags and extra ones
// (after a Kill), and waits for its /readyz.
func (ks *KubeSync) Start(extra ...string) error {
	ks.args = append(ks.args, extra...)
	if err := ks.start(ks.bin, ks.args, "http "+ks.HTTPAddr); err != nil {
		return err
	}
	return awaitOK(&http.Client{Timeout: time.Second}, "http://"+ks.HTTPAddr+"/readyz", "", 60*time.Second, &ks.proc)
}
