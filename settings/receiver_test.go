package settings

import (
	"strings"
	"testing"
	"time"
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

func TestReceiverSweepSetting(t *testing.T) {
	for raw, want := range map[string]time.Duration{"": DefaultReceiverSweep, "0": 0, "5s": 5 * time.Second} {
		s, err := LoadReceiverSettings(lookupFrom(map[string]string{EnvReceiverSweep: raw}))
		if err != nil || s.Sweep != want {
			t.Errorf("%q: %v %v, want %v", raw, s.Sweep, err, want)
		}
	}
	for _, raw := range []string{"soon", "10ms", "-1s"} {
		_, err := LoadReceiverSettings(lookupFrom(map[string]string{EnvReceiverSweep: raw}))
		if err == nil || !strings.Contains(err.Error(), "SLUICE_RECEIVER_SWEEP: must be a duration of at least 1s") {
			t.Errorf("%q: %v", raw, err)
		}
	}
}
