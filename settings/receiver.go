package settings

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
)

// ReceiverSettings configure `sluice receiver`, from SLUICE_RECEIVER_*.
type ReceiverSettings struct {
	// Addr serves CloudEvents on / and /healthz, /readyz, /metrics.
	Addr    string
	MaxBody int64
	// Namespaces, if set, are the only namespaces events may be about.
	Namespaces []string
	// AllowUnauthenticatedSource lets ApiServerSource events in without a
	// token. Command events always need one.
	AllowUnauthenticatedSource bool
	TokensFile                 string
	OIDCIssuer                 string
	OIDCAudience               string
	// Cluster and TaskQueue: as the worker's (Settings) of this cluster.
	Cluster    string
	TaskQueue  string
	Kubeconfig string
	Admission  AdmissionSettings
	// Profiling: as the worker's (Settings).
	Profiling bool
	// Sweep is how often the receiver looks for opted-in targets whose
	// newest Revision no event brought it (0: never).
	Sweep time.Duration
}

// AdmissionSettings configure the receiver's mutating admission webhook,
// which pins latestRevision traffic in the write that changes an opted-in
// Service's template (see admission). Off unless Addr is set.
type AdmissionSettings struct {
	// Addr is the TLS listen address.
	Addr string
	// Hosts are the names the API server dials the webhook by.
	Hosts []string
	// SecretNamespace/SecretName hold the certificates all replicas share.
	SecretNamespace, SecretName string
	// Webhook names the MutatingWebhookConfiguration whose caBundle the
	// receiver keeps, PolicyWebhook the ValidatingWebhookConfiguration of
	// the policy webhook.
	Webhook, PolicyWebhook string
}

// Receiver environment variables.
const (
	EnvReceiverAddr            = "SLUICE_RECEIVER_ADDR"
	EnvReceiverSweep           = "SLUICE_RECEIVER_SWEEP"
	EnvReceiverMaxBody         = "SLUICE_RECEIVER_MAX_BODY"
	EnvReceiverNamespaces      = "SLUICE_RECEIVER_NAMESPACES"
	EnvReceiverAllowUnauthSrc  = "SLUICE_RECEIVER_ALLOW_UNAUTHENTICATED_SOURCE"
	EnvReceiverTokensFile      = "SLUICE_RECEIVER_TOKENS_FILE"
	EnvReceiverOIDCIssuer      = "SLUICE_RECEIVER_OIDC_ISSUER"
	EnvReceiverOIDCAudience    = "SLUICE_RECEIVER_OIDC_AUDIENCE"
	EnvAdmissionAddr           = "SLUICE_ADMISSION_ADDR"
	EnvAdmissionHosts          = "SLUICE_ADMISSION_HOSTS"
	EnvAdmissionSecret         = "SLUICE_ADMISSION_SECRET"
	EnvAdmissionWebhook        = "SLUICE_ADMISSION_WEBHOOK"
	DefaultAdmissionSecret     = "sluice-system/sluice-admission-certs"
	DefaultAdmissionWebhook    = "sluice-pin-latest"
	EnvAdmissionPolicyWebhook  = "SLUICE_ADMISSION_POLICY_WEBHOOK"
	DefaultPolicyWebhook       = "sluice-policy"
	DefaultReceiverAddr        = ":8081"
	defaultReceiverMaxBodySize = 1 << 20
	// DefaultReceiverSweep is how often the receiver sweeps by default.
	DefaultReceiverSweep = 30 * time.Second
)

// LoadReceiverSettings reads the receiver's settings through lookup.
func LoadReceiverSettings(lookup func(string) (string, bool)) (ReceiverSettings, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	s := ReceiverSettings{
		Addr: DefaultReceiverAddr, MaxBody: defaultReceiverMaxBodySize, AllowUnauthenticatedSource: true,
		TokensFile: get(EnvReceiverTokensFile), OIDCIssuer: get(EnvReceiverOIDCIssuer), OIDCAudience: get(EnvReceiverOIDCAudience),
		TaskQueue: api.DefaultTaskQueue, Kubeconfig: get(EnvKubeconfig), Sweep: DefaultReceiverSweep,
	}
	var errs []error
	if v := get(EnvReceiverAddr); v != "" {
		s.Addr = v
	}
	if v := get(EnvCluster); v != "" {
		if err := config.ValidateCluster(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvCluster, err))
		}
		s.Cluster, s.TaskQueue = v, api.ClusterTaskQueue(v)
	}
	if v := get(EnvTaskQueue); v != "" {
		s.TaskQueue = v
	}
	if v := get(EnvReceiverMaxBody); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1024 {
			errs = append(errs, fmt.Errorf("%s: must be a byte count of at least 1024, got %q", EnvReceiverMaxBody, v))
		} else {
			s.MaxBody = n
		}
	}
	if v := get(EnvReceiverSweep); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || (d != 0 && d < time.Second) {
			errs = append(errs, fmt.Errorf("%s: must be a duration of at least 1s, or 0 to turn the sweep off, got %q", EnvReceiverSweep, v))
		} else {
			s.Sweep = d
		}
	}
	if p, err := LoadProfiling(lookup); err != nil {
		errs = append(errs, err)
	} else {
		s.Profiling = p
	}
	if v := get(EnvReceiverNamespaces); v != "" {
		s.Namespaces = config.SplitList(v)
	}
	if v := get(EnvReceiverAllowUnauthSrc); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: must be true or false, got %q", EnvReceiverAllowUnauthSrc, v))
		} else {
			s.AllowUnauthenticatedSource = b
		}
	}
	if s.Admission.Addr = get(EnvAdmissionAddr); s.Admission.Addr != "" {
		s.Admission.Hosts = config.SplitList(get(EnvAdmissionHosts))
		if len(s.Admission.Hosts) == 0 {
			errs = append(errs, fmt.Errorf("%s: name the hosts the API server calls the webhook by (its Service's DNS name), e.g. sluice-receiver.sluice-system.svc", EnvAdmissionHosts))
		}
		secret := DefaultAdmissionSecret
		if v := get(EnvAdmissionSecret); v != "" {
			secret = v
		}
		ns, name, ok := strings.Cut(secret, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			errs = append(errs, fmt.Errorf("%s: want namespace/name of the Secret for the webhook's certificates, got %q", EnvAdmissionSecret, secret))
		}
		s.Admission.SecretNamespace, s.Admission.SecretName = ns, name
		s.Admission.Webhook = DefaultAdmissionWebhook
		if v, ok := lookup(EnvAdmissionWebhook); ok {
			s.Admission.Webhook = strings.TrimSpace(v) // "" leaves the caBundle to someone else
		}
		s.Admission.PolicyWebhook = DefaultPolicyWebhook
		if v, ok := lookup(EnvAdmissionPolicyWebhook); ok {
			s.Admission.PolicyWebhook = strings.TrimSpace(v)
		}
	}
	if (s.OIDCIssuer == "") != (s.OIDCAudience == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together: set both to verify OIDC tokens", EnvReceiverOIDCIssuer, EnvReceiverOIDCAudience))
	}
	return s, errors.Join(errs...)
}
