package stack

// The control plane: etcd, the API server and what it is given (CRDs,
// sluice's manifests, an audit policy, credentials).

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
)

// Kube is a Kubernetes client of the stack's API server, as its administrator.
func (s *Stack) Kube() kubernetes.Interface { return kubernetes.NewForConfigOrDie(s.Rest) }

func (s *Stack) startEtcd(ctx context.Context) error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	cu := fmt.Sprintf("http://127.0.0.1:%d", client)
	pu := fmt.Sprintf("http://127.0.0.1:%d", peer)
	s.etcd, err = startProc(s.opts.Dir, "etcd", nil, filepath.Join(s.opts.Tools.EtcdDir, "etcd"),
		"--data-dir", filepath.Join(s.opts.Dir, "etcd"), "--name", "stack",
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu, "--initial-cluster", "stack="+pu,
		"--log-level", "warn", "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	s.etcdURL = cu
	return waitFor(ctx, s.etcd, "etcd", 30*time.Second, func() error {
		resp, err := http.Get(cu + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
}

func (s *Stack) startAPIServer(ctx context.Context) error {
	dir := s.opts.Dir
	port, err := freePort()
	if err != nil {
		return err
	}
	token := randomToken()
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	if err := writeServiceAccountKeys(dir); err != nil {
		return err
	}
	var audit []string
	if s.opts.Audit {
		s.AuditLog = filepath.Join(dir, "audit.log")
		if err := os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte(s.auditPolicy()), 0o600); err != nil {
			return err
		}
		mode := "batch"
		if s.opts.AuditBlocking {
			mode = "blocking"
		}
		audit = []string{"--audit-policy-file", filepath.Join(dir, "audit-policy.yaml"), "--audit-log-path", s.AuditLog,
			"--audit-log-format", "json", "--audit-log-mode", mode, "--audit-log-maxsize", "0"}
	}
	addr := s.opts.APIServerAddress
	if addr == "" {
		addr = "127.0.0.1"
	}
	if s.opts.AggregatorRouting {
		audit = append(audit, "--enable-aggregator-routing=true")
	}
	s.apiserver, err = startProc(dir, "kube-apiserver", nil, filepath.Join(s.opts.Tools.KubeDir, "kube-apiserver"), append([]string{
		"--etcd-servers", s.etcdURL,
		"--bind-address", addr, "--advertise-address", addr, "--secure-port", fmt.Sprint(port),
		"--cert-dir", filepath.Join(dir, "pki"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		// Knative gives every Revision two ClusterIP Services (the
		// ServerlessService's public and private ones): a /24 is full at
		// about 120 Revisions, and the benchmark runs hundreds.
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--endpoint-reconciler-type", "none",
		"--enable-priority-and-fairness=false",
		"--v", "0"}, audit...)...)
	if err != nil {
		return err
	}
	s.KubeURL = fmt.Sprintf("https://%s:%d", addr, port)
	// The stack's own client is quiet: Knative's advice on security
	// contexts, or the Endpoints deprecation, is not the tests' to act on.
	s.Rest = &rest.Config{Host: s.KubeURL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400,
		WarningHandler: rest.NoWarnings{}}
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(s.Kubeconfig, s.KubeURL, token); err != nil {
		return err
	}
	if err := waitFor(ctx, s.apiserver, "kube-apiserver", 60*time.Second, s.apiServerReady(token)); err != nil {
		return err
	}
	s.Serving, err = servingclient.NewForConfig(s.Rest)
	return err
}

// apiServerReady passes once the API server's /readyz answers 200.
func (s *Stack) apiServerReady(token string) func() error {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}
	return func() error {
		req, _ := http.NewRequest(http.MethodGet, s.KubeURL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	}
}

func (s *Stack) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.opts.Tools.KubeDir, "kubectl"), append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Kubectl runs kubectl against the stack as its administrator.
func (s *Stack) Kubectl(ctx context.Context, args ...string) (string, error) {
	return s.kubectl(ctx, args...)
}

func (s *Stack) applyCRDs(ctx context.Context) error {
	if len(s.opts.CRDDirs) == 0 {
		return errors.New("no Knative CRD directories given")
	}
	args := []string{"apply", "--server-side", "--force-conflicts"}
	for _, d := range s.opts.CRDDirs {
		args = append(args, "-f", d)
	}
	if _, err := s.kubectl(ctx, args...); err != nil {
		return err
	}
	return s.waitEstablished(ctx, "services.serving.knative.dev", "configurations.serving.knative.dev",
		"revisions.serving.knative.dev", "routes.serving.knative.dev")
}

// waitEstablished waits until the API server serves each named CRD. It polls
// rather than running kubectl wait, which fails outright instead of waiting
// when it reads a CRD whose status.conditions is still null, as a freshly
// applied one's can be.
func (s *Stack) waitEstablished(ctx context.Context, names ...string) error {
	client, err := dynamic.NewForConfig(s.Rest)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	for _, name := range names {
		err := waitFor(ctx, nil, "CRD "+name, 60*time.Second, func() error {
			crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				c, _ := c.(map[string]any)
				if c["type"] == "Established" && c["status"] == "True" {
					return nil
				}
			}
			return errors.New("not Established yet")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// applyDeploy applies sluice's manifests and gives the worker and receiver
// kubeconfigs with their ServiceAccounts' tokens. Without DeployDir they use
// the administrator's.
func (s *Stack) applyDeploy(ctx context.Context) error {
	s.workerKubeconfig, s.receiverKubeconfig = s.Kubeconfig, s.Kubeconfig
	sluiceKube := s.KubeURL
	if s.opts.Via != nil {
		addr, err := s.opts.Via("kube-apiserver", strings.TrimPrefix(s.KubeURL, "https://"))
		if err != nil {
			return err
		}
		sluiceKube = "https://" + addr
		if s.opts.DeployDir == "" {
			s.workerKubeconfig = filepath.Join(s.opts.Dir, "sluice.kubeconfig")
			s.receiverKubeconfig = s.workerKubeconfig
			return writeKubeconfig(s.workerKubeconfig, sluiceKube, s.Rest.BearerToken)
		}
	}
	if s.opts.DeployDir == "" {
		return nil
	}
	if _, err := s.kubectl(ctx, "apply", "--server-side", "-k", s.opts.DeployDir); err != nil {
		return err
	}
	if err := s.waitEstablished(ctx, "rollouts.sluice.dev"); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.admissionPort = port
	if err := s.InstallAdmissionWebhook(ctx); err != nil {
		return err
	}
	s.workerKubeconfig, err = s.serviceAccountKubeconfig(ctx, sluiceKube, "sluice-system", "sluice-worker")
	if err != nil {
		return err
	}
	if s.opts.Controller {
		s.receiverKubeconfig = s.workerKubeconfig
		return s.bindReceiverRolesToWorker(ctx)
	}
	s.receiverKubeconfig, err = s.serviceAccountKubeconfig(ctx, sluiceKube, "sluice-system", "sluice-receiver")
	return err
}

// ServiceAccountKubeconfig writes a kubeconfig that reaches the API server
// as the ServiceAccount namespace/name (a token valid 48 hours): what a pod
// running as that account would have mounted. It returns the file's path.
func (s *Stack) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	return s.serviceAccountKubeconfig(ctx, s.KubeURL, namespace, name)
}

func (s *Stack) serviceAccountKubeconfig(ctx context.Context, server, namespace, name string) (string, error) {
	token, err := s.kubectl(ctx, "create", "token", name, "-n", namespace, "--duration", "48h")
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.opts.Dir, namespace+"-"+name+".kubeconfig")
	return path, writeKubeconfig(path, server, strings.TrimSpace(token))
}

// The API server's audit policy is built from these parts. auditTraffic
// records traffic patches with their bodies (which step a patch is):
// all that Options.AuditTrafficOnly keeps. auditKnative adds what the
// benchmark and chaos runs read: Revisions' status writes with theirs
// (when a Revision turned Ready), every other request on Knative's kinds
// without (who asked for what, and when). With Options.AuditPods,
// podsAuditRules come before the last of them.
const (
	auditHeader = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
`
	auditTraffic = `- level: Request
  verbs: [patch, update]
  resources: [{group: serving.knative.dev, resources: [services, routes]}]
`
	auditKnative = `- level: Request
  verbs: [update, patch]
  resources: [{group: serving.knative.dev, resources: [revisions/status]}]
%s- level: Metadata
  resources: [{group: serving.knative.dev}, {group: flagger.app}]
`
	auditNothingElse = "- level: None\n"
)

func (s *Stack) auditPolicy() string {
	if s.opts.AuditTrafficOnly {
		return auditHeader + auditTraffic + auditNothingElse
	}
	pods := ""
	if s.opts.AuditPods {
		pods = podsAuditRules
	}
	return auditHeader + auditTraffic + fmt.Sprintf(auditKnative, pods) + auditNothingElse
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func writeKubeconfig(path, server, token string) error {
	cfg := clientcmdConfig(server, token)
	return clientcmd.WriteToFile(*cfg, path)
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// podsAuditRules record Revisions as created, answer included (whether
// sluice's admission webhook bounded them), and Deployments' status writes
// (how many pods each Revision ran and had Ready).
const podsAuditRules = `- level: RequestResponse
  verbs: [create]
  resources: [{group: serving.knative.dev, resources: [revisions]}]
- level: Request
  verbs: [update, patch]
  resources: [{group: apps, resources: [deployments/status]}]
`

// bindReceiverRolesToWorker gives the worker's ServiceAccount the
// receiver's rights too, as an install running `sluice controller` as that
// account does (docs/operations.md).
func (s *Stack) bindReceiverRolesToWorker(ctx context.Context) error {
	const sa = "sluice-system:sluice-worker"
	for _, role := range []string{"sluice-receiver", "sluice-receiver-admission"} {
		if _, err := s.kubectl(ctx, "create", "clusterrolebinding", "sluice-controller-"+role, "--clusterrole", role, "--serviceaccount", sa); err != nil {
			return err
		}
	}
	_, err := s.kubectl(ctx, "create", "rolebinding", "sluice-controller-receiver-admission", "-n", "sluice-system",
		"--role", "sluice-receiver-admission", "--serviceaccount", sa)
	return err
}
