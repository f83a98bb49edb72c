package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/test/knativefake"
)

// running gives a fake Revision one container running image.
func running(r *servingv1.Revision, image string) *servingv1.Revision {
	r.Spec.Containers = []corev1.Container{{Name: "user-container", Image: image,
		Env: []corev1.EnvVar{{Name: "GREETING", Value: "hello"}}}}
	return r
}

// shippedObjects is hello after a rollout gave hello-00002 all the traffic
// (tags kept), with ann on the Service, and hello-00003, a new Revision
// running image.
func shippedObjects(ann map[string]string, image string) []runtime.Object {
	base := map[string]string{config.AnnotationSteps: "25,50,100", config.AnnotationHold: "1m"}
	for k, v := range ann {
		base[k] = v
	}
	return []runtime.Object{
		knativefake.Service(ns, "hello", base,
			knativefake.Target("hello-00002", 100, ""),
			knativefake.Target("hello-00001", 0, "previous")),
		running(knativefake.Revision(ns, "hello", 1, true), "example.com/hello:v1"),
		running(knativefake.Revision(ns, "hello", 2, true), "example.com/hello:v2"),
		running(knativefake.Revision(ns, "hello", 3, true), image),
	}
}

func (h *harness) serviceAnnotation(key string) string {
	h.t.Helper()
	svc, err := h.k.ServingV1().Services(ns).Get(context.Background(), "hello", metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get service: %v", err)
	}
	return svc.Annotations[key]
}

func (h *harness) undo(to, reason string) {
	h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: helloTarget, Candidate: to, RequestedBy: "oncall@example.com", Undo: &api.Undo{Reason: reason}}})
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
}

func historyOf(stints ...config.Stint) string { return config.FormatStableHistory(stints) }

func TestSucceededRolloutRecordsItsStable(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result = %+v", res)
	}
	got := config.ParseStableHistory(h.serviceAnnotation(config.AnnotationStableHistory))
	if len(got) != 1 || got[0].Revision != "hello-00001" || got[0].Until.IsZero() {
		t.Fatalf("%s = %+v, want hello-00001 with the time it lost 100%%", config.AnnotationStableHistory, got)
	}
	if mark := h.endedMark("hello", "hello-00002"); mark != "" {
		t.Errorf("a succeeded candidate is marked %s", mark)
	}
}

func TestUndoGoesBackInOneWrite(t *testing.T) {
	shipped := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second)
	h := newHarness(t, shippedObjects(map[string]string{
		config.AnnotationStableHistory: historyOf(config.Stint{Revision: "hello-00001", Until: shipped}),
		config.AnnotationAnalysis:      "webhooks:\n- {name: smoke, url: http://127.0.0.1:1/never-called, at: before-start}\n",
	}, "example.com/hello:v3")...)
	h.undo("", "p99 doubled since the deploy")
	res := h.result()
	if res.Outcome != api.OutcomeSucceeded || res.Candidate != "hello-00001" || res.Stable != "hello-00002" {
		t.Fatalf("result = %+v, want hello-00001 back from hello-00002", res)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 0, "previous"), tgt("hello-00001", 100, ""))
	if n := h.k.WriteCount("hello"); n != 1 {
		t.Errorf("traffic writes = %d, want 1: an undo is one write", n)
	}
	if mark := h.endedMark("hello", "hello-00002"); mark != outcomeUndone {
		t.Errorf("hello-00002 is marked %q, want %s so its own events do not roll it out again", mark, outcomeUndone)
	}
	got := config.ParseStableHistory(h.serviceAnnotation(config.AnnotationStableHistory))
	if len(got) != 1 || got[0] != (config.Stint{Revision: "hello-00001", Until: shipped}) {
		t.Errorf("history = %+v, want it as it was: the undone hello-00002 is not known to be good", got)
	}
	st := h.status()
	if !strings.Contains(st.Shortcut, "undo by oncall@example.com: p99 doubled since the deploy") || st.StepCount != 1 || st.Analysis != nil {
		t.Errorf("status: shortcut %q, %d steps, analysis %v; want the undo's why, one step, no analysis", st.Shortcut, st.StepCount, st.Analysis)
	}
	if len(st.Commands) != 1 || st.Commands[0].Name != api.CommandUndo || st.Commands[0].By != "oncall@example.com" {
		t.Errorf("commands = %+v, want the undo, by whom", st.Commands)
	}
	if !strings.Contains(res.Reason, "undo by oncall@example.com") {
		t.Errorf("reason = %q, want the undo named", res.Reason)
	}
}

func TestUndoToANamedRevision(t *testing.T) {
	objs := append(shippedObjects(nil, "example.com/hello:v3"), running(knativefake.Revision(ns, "hello", 0, true), "example.com/hello:v0"))
	h := newHarness(t, objs...)
	h.undo("hello-00000", "back to the build before last")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded || res.Candidate != "hello-00000" {
		t.Fatalf("result = %+v", res)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 0, "previous"), tgt("hello-00000", 100, ""))
}

func TestUndoRefusals(t *testing.T) {
	for _, c := range []struct {
		name, history, to, want string
	}{
		{"no history", "", "", "name the Revision to go back to: sluice undo hello --to REVISION"},
		{"history gone", historyOf(config.Stint{Revision: "hello-00000", Until: time.Now()}), "", "still exists"},
		{"already there", "", "hello-00002", "hello-00002 already serves"},
		{"no such Revision", "", "hello-00042", "hello-00042 not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ann := map[string]string{}
			if c.history != "" {
				ann[config.AnnotationStableHistory] = c.history
			}
			h := newHarness(t, shippedObjects(ann, "example.com/hello:v3")...)
			h.undo(c.to, "drill")
			res := h.result()
			if res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, c.want) {
				t.Fatalf("result = %+v, want Failed saying %q", res, c.want)
			}
			if n := h.k.WriteCount("hello"); n != 0 {
				t.Errorf("traffic writes = %d, want none", n)
			}
		})
	}
}

func TestRevertWithinTheRollbackWindow(t *testing.T) {
	recent := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	for _, c := range []struct {
		name, image, window string
		until               time.Time
		writes              int
		shortcut            string
	}{
		{"revert within the window", "example.com/hello:v1", "24h", recent, 1, "same template as hello-00001, which had 100% of the traffic until " + recent.Format(time.RFC3339)},
		{"same template as the stable", "example.com/hello:v2", "24h", recent, 1, "same template as hello-00002, which has 100% of the traffic now"},
		{"revert older than the window", "example.com/hello:v1", "30m", recent, 3, ""},
		{"a new template", "example.com/hello:v3", "24h", recent, 3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, shippedObjects(map[string]string{
				config.AnnotationRollbackWindow: c.window,
				config.AnnotationStableHistory:  historyOf(config.Stint{Revision: "hello-00001", Until: c.until}),
			}, c.image)...)
			h.run("hello-00003")
			if res := h.result(); res.Outcome != api.OutcomeSucceeded {
				t.Fatalf("result = %+v", res)
			}
			if n := h.k.WriteCount("hello"); n != c.writes {
				t.Errorf("traffic writes = %d, want %d", n, c.writes)
			}
			st := h.status()
			if c.shortcut == "" && st.Shortcut != "" || !strings.Contains(st.Shortcut, c.shortcut) {
				t.Errorf("shortcut = %q, want %q", st.Shortcut, c.shortcut)
			}
		})
	}
}

// With a capacity policy, the Revision an undo goes back to gets the
// stable's pods before it gets the traffic — all of it, in one write.
func TestUndoScalesUpFirst(t *testing.T) {
	h := newHarness(t, capacityObjects(map[string]string{config.AnnotationCapacity: "availability"})...)
	h.undo("hello-00002", "drill")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded || res.Candidate != "hello-00002" {
		t.Fatalf("result = %+v", res)
	}
	if n := h.k.WriteCount("hello"); n != 1 {
		t.Errorf("traffic writes = %d, want 1", n)
	}
	for _, s := range h.k.SamplesNow() {
		if s.Wrote == "hello" && s.Traffic["hello-00002"] > 0 && s.Pods["hello-00002"] != 8 {
			t.Fatalf("hello-00002 got %d%% of the traffic with %d pods, want the stable's 8 first", s.Traffic["hello-00002"], s.Pods["hello-00002"])
		}
	}
	if st := h.status(); st.Capacity == nil || len(st.Capacity.Stages) != 1 {
		t.Errorf("capacity stages: %+v, want one", st.Capacity)
	}
}
