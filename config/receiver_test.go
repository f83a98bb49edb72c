package config

import (
	"strings"
	"testing"
)

func TestAdmissionSettings(t *testing.T) {
	s, err := LoadReceiverSettings(lookupFrom(map[string]string{}))
	if err != nil || s.Admission.Addr != "" {
		t.Fatalf("off by default: %+v %v", s.Admission, err)
	}
	s, err = LoadReceiverSettings(lookupFrom(map[string]string{EnvAdmissionAddr: ":8443", EnvAdmissionHosts: "sluice-receiver.sluice-system.svc, 127.0.0.1"}))
	if err != nil || s.Admission.SecretNamespace != "sluice-system" || s.Admission.SecretName != "sluice-admission-certs" ||
		s.Admission.Webhook != DefaultAdmissionWebhook || len(s.Admission.Hosts) != 2 || s.Admission.Hosts[1] != "127.0.0.1" {
		t.Fatalf("defaults: %+v %v", s.Admission, err)
	}
	for env, want := range map[string]string{
		EnvAdmissionHosts:  "SLUICE_ADMISSION_HOSTS: name the hosts",
		EnvAdmissionSecret: "SLUICE_ADMISSION_SECRET: want namespace/name",
	} {
		vals := map[string]string{EnvAdmissionAddr: ":8443", EnvAdmissionHosts: "h", env: ""}
		if env == EnvAdmissionSecret {
			vals[env] = "no-namespace"
		}
		if _, err := LoadReceiverSettings(lookupFrom(vals)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", env, err, want)
		}
	}
}
