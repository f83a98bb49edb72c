package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The API server calls the webhook over TLS and checks its certificate
// against the caBundle of the webhook's configuration. sluice makes its own
// CA and serving certificate, keeps them in a Secret that every receiver
// replica shares, and writes the CA into the configuration — as Knative's
// own webhook does — so installing needs no certificate manager.

// Secret keys.
const (
	keyCA   = "ca.crt"
	keyCert = "tls.crt"
	keyKey  = "tls.key"
)

// certLifetime is how long a generated certificate is valid; certRenew is
// how long before its end a receiver starting up makes a new one.
const (
	certLifetime = 365 * 24 * time.Hour
	certRenew    = 30 * 24 * time.Hour
)

// Certs are the webhook's serving certificate and the CA that signed it.
type Certs struct {
	CA, Cert, Key []byte // PEM
}

// TLS is the serving certificate for a tls.Config.
func (c Certs) TLS() (tls.Certificate, error) { return tls.X509KeyPair(c.Cert, c.Key) }

// NewCerts makes a CA and a serving certificate for hosts (DNS names or IP
// addresses), valid from now for certLifetime.
func NewCerts(hosts []string, now time.Time) (Certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certs{}, fmt.Errorf("generate CA key: %w", err)
	}
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "sluice admission CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return Certs{}, fmt.Errorf("sign CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certs{}, fmt.Errorf("generate serving key: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Certs{}, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Certs{}, fmt.Errorf("encode serving key: %w", err)
	}
	return Certs{
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// usable reports whether certs hold a serving certificate for every host
// that is valid for longer than certRenew.
func usable(c Certs, hosts []string, now time.Time) bool {
	pair, err := c.TLS()
	if err != nil || len(c.CA) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Add(certRenew).After(leaf.NotAfter) {
		return false
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// SharedCerts reads the webhook's certificates from the Secret
// namespace/name, or makes them and stores them there if it is missing, or
// holds certificates for other hosts, or ones near their end. Replicas that
// start at once agree through the API server: the first write wins, the
// others re-read it.
func SharedCerts(ctx context.Context, kube kubernetes.Interface, namespace, name string, hosts []string, now time.Time) (Certs, error) {
	secrets := kube.CoreV1().Secrets(namespace)
	for attempt := 0; attempt < 3; attempt++ {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return Certs{}, fmt.Errorf("read Secret %s/%s: %w", namespace, name, err)
		}
		if err == nil {
			have := Certs{CA: s.Data[keyCA], Cert: s.Data[keyCert], Key: s.Data[keyKey]}
			if usable(have, hosts, now) {
				return have, nil
			}
		}
		made, genErr := NewCerts(hosts, now)
		if genErr != nil {
			return Certs{}, genErr
		}
		data := map[string][]byte{keyCA: made.CA, keyCert: made.Cert, keyKey: made.Key}
		if apierrors.IsNotFound(err) {
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/name": "sluice"}},
				Type:       corev1.SecretTypeTLS, Data: data,
			}, metav1.CreateOptions{})
		} else {
			s.Data = data
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			return made, nil
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			continue // another replica got there first: use theirs
		default:
			return Certs{}, fmt.Errorf("store the webhook's certificates in Secret %s/%s: %w", namespace, name, err)
		}
	}
	return Certs{}, fmt.Errorf("store the webhook's certificates in Secret %s/%s: still conflicting", namespace, name)
}

// Kinds of webhook configuration whose caBundle the receiver keeps.
const (
	Mutating   = "MutatingWebhookConfiguration"
	Validating = "ValidatingWebhookConfiguration"
)

// InjectCABundle writes ca into every webhook of the webhook configuration
// kind/name that does not carry it yet. It is called again and again, so a
// configuration re-applied without its caBundle (by GitOps, say) is mended
// within a period.
func InjectCABundle(ctx context.Context, kube kubernetes.Interface, kind, name string, ca []byte) (changed bool, err error) {
	api := kube.AdmissionregistrationV1()
	var bundles [][]byte
	var resourceVersion string
	switch kind {
	case Mutating:
		cfg, err := api.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read %s %s: %w", kind, name, err)
		}
		for _, wh := range cfg.Webhooks {
			bundles = append(bundles, wh.ClientConfig.CABundle)
		}
		resourceVersion = cfg.ResourceVersion
	case Validating:
		cfg, err := api.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read %s %s: %w", kind, name, err)
		}
		for _, wh := range cfg.Webhooks {
			bundles = append(bundles, wh.ClientConfig.CABundle)
		}
		resourceVersion = cfg.ResourceVersion
	default:
		return false, fmt.Errorf("unknown webhook configuration kind %q", kind)
	}
	var ops []map[string]any
	for i, b := range bundles {
		if !bytes.Equal(b, ca) {
			ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": ca})
		}
	}
	if len(ops) == 0 {
		return false, nil
	}
	// The resourceVersion test makes a concurrent edit fail the patch
	// rather than have it land on the wrong list entry.
	ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": resourceVersion}}, ops...)
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, fmt.Errorf("encode caBundle patch: %w", err)
	}
	opts := metav1.PatchOptions{FieldManager: "sluice-receiver"}
	if kind == Mutating {
		_, err = api.MutatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, opts)
	} else {
		_, err = api.ValidatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, opts)
	}
	if err != nil {
		return false, fmt.Errorf("write the caBundle of %s %s: %w", kind, name, err)
	}
	return true, nil
}
