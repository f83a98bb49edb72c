package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	TaskQueue                  string
	Kubeconfig                 string
}

// Receiver environment variables.
const (
	EnvReceiverAddr            = "SLUICE_RECEIVER_ADDR"
	EnvReceiverMaxBody         = "SLUICE_RECEIVER_MAX_BODY"
	EnvReceiverNamespaces      = "SLUICE_RECEIVER_NAMESPACES"
	EnvReceiverAllowUnauthSrc  = "SLUICE_RECEIVER_ALLOW_UNAUTHENTICATED_SOURCE"
	EnvReceiverTokensFile      = "SLUICE_RECEIVER_TOKENS_FILE"
	EnvReceiverOIDCIssuer      = "SLUICE_RECEIVER_OIDC_ISSUER"
	EnvReceiverOIDCAudience    = "SLUICE_RECEIVER_OIDC_AUDIENCE"
	DefaultReceiverAddr        = ":8081"
	defaultReceiverMaxBodySize = 1 << 20
)

// LoadReceiverSettings reads the receiver's settings through lookup.
func LoadReceiverSettings(lookup func(string) (string, bool)) (ReceiverSettings, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	s := ReceiverSettings{
		Addr: DefaultReceiverAddr, MaxBody: defaultReceiverMaxBodySize, AllowUnauthenticatedSource: true,
		TokensFile: get(EnvReceiverTokensFile), OIDCIssuer: get(EnvReceiverOIDCIssuer), OIDCAudience: get(EnvReceiverOIDCAudience),
		TaskQueue: DefaultTaskQueue, Kubeconfig: get(EnvKubeconfig),
	}
	var errs []error
	if v := get(EnvReceiverAddr); v != "" {
		s.Addr = v
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
	if v := get(EnvReceiverNamespaces); v != "" {
		s.Namespaces = splitList(v)
	}
	if v := get(EnvReceiverAllowUnauthSrc); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: must be true or false, got %q", EnvReceiverAllowUnauthSrc, v))
		} else {
			s.AllowUnauthenticatedSource = b
		}
	}
	if (s.OIDCIssuer == "") != (s.OIDCAudience == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together: set both to verify OIDC tokens", EnvReceiverOIDCIssuer, EnvReceiverOIDCAudience))
	}
	return s, errors.Join(errs...)
}
