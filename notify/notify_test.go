package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/notifications-engine/pkg/api"
	"github.com/argoproj/notifications-engine/pkg/services"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/testkit"
)

type targets map[string][2]map[string]string

func (t targets) Metadata(_ context.Context, ref knative.TargetRef) (map[string]string, map[string]string, error) {
	m := t[ref.Namespace+"/"+ref.Name]
	return m[0], m[1], nil
}

// factory is notifications-engine's own factory over a fake cluster
// holding cm and secret.
func factory(t *testing.T, cm *corev1.ConfigMap, secret *corev1.Secret) api.Factory {
	t.Helper()
	kube := kubefake.NewClientset(cm, secret)
	inf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace("sluice-system"))
	cms, secrets := inf.Core().V1().ConfigMaps().Informer(), inf.Core().V1().Secrets().Informer()
	settings, err := Settings("sluice-system")
	if err != nil {
		t.Fatal(err)
	}
	f := api.NewFactory(settings, "sluice-system", secrets, cms)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), cms.HasSynced, secrets.HasSynced)
	return f
}

func config(server string) (*corev1.ConfigMap, *corev1.Secret) {
	meta := metav1.ObjectMeta{Name: ConfigName, Namespace: "sluice-system"}
	return &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{
		"service.slack":         "token: $slack-token\napiURL: " + server + "/api/\n",
		"service.teams":         "recipientUrls:\n  deploys: " + server + "/teams/deploys\n",
		"service.webhook.audit": "url: " + server + "/audit\nheaders:\n- {name: Content-Type, value: application/json}\n",
		"subscriptions":         "- recipients: [audit]\n  selector: team=payments\n  triggers: [on-rollout-rolled-back]\n",
	}}, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"slack-token": []byte("xoxb-test")}}
}

func rolledBack(id string) events.Progress {
	return events.Progress{ID: id, Type: events.ProgressRolledBack, Time: time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC),
		Data: events.ProgressData{Namespace: "shop", Kind: "Service", Name: "hello", WorkflowID: "rollout/c1/shop/service/hello",
			Candidate: "hello-00002", Stable: "hello-00001", Phase: "RolledBack", Reason: "check error-rate failed: 0.31 > 0.01",
			By: "sluice analysis", Sequence: 7}}
}

func TestRolledBackReachesSlackTeamsAndWebhook(t *testing.T) {
	srv := testkit.NewChat(t)
	srv.Fail = 1 // the first request is refused, and retried
	cm, secret := config(srv.URL)
	n := New(factory(t, cm, secret), targets{"shop/hello": {
		{"team": "payments"},
		{AnnotationPrefix + "/subscribe.on-rollout-rolled-back.slack": "deploys",
			AnnotationPrefix + "/subscribe.on-rollout-rolled-back.teams": "deploys"},
	}}, slog.New(slog.DiscardHandler))
	n.Backoff = func(int) time.Duration { return 0 }
	n.UI, n.Namespace = "http://temporal.example:8233", "default"
	if !n.Configured() {
		t.Fatal("Configured() = false with three services configured")
	}
	p := rolledBack("ev-7")
	n.notify(context.Background(), p)
	n.notify(context.Background(), p) // a retried progress activity

	slack, teams, hook := testkit.Split(srv.Requests())
	if len(slack) != 1 || len(teams) != 1 || len(hook) != 1 {
		t.Fatalf("got %d Slack, %d Teams, %d webhook requests; want one each", len(slack), len(teams), len(hook))
	}
	want := "shop/hello: hello-00002 rolled back to hello-00001: check error-rate failed: 0.31 > 0.01 " +
		"(http://temporal.example:8233/namespaces/default/workflows/rollout%2Fc1%2Fshop%2Fservice%2Fhello)"
	if got := slack[0].Form.Get("text"); got != want {
		t.Errorf("Slack text = %q, want %q", got, want)
	}
	if got := slack[0].Form.Get("channel"); got != "deploys" {
		t.Errorf("Slack channel = %q, want deploys", got)
	}
	var card map[string]any
	if err := json.Unmarshal([]byte(teams[0].Body), &card); err != nil {
		t.Fatalf("Teams body is not JSON: %v: %s", err, teams[0].Body)
	}
	if card["@type"] != "MessageCard" || card["title"] != "Rollout rolled back: shop/hello" || card["text"] != want ||
		card["themeColor"] != "#E01E5A" {
		t.Errorf("Teams card = %v", card)
	}
	var ev struct {
		ID, Type, Trigger string
		Data              events.ProgressData
	}
	if err := json.Unmarshal([]byte(hook[0].Body), &ev); err != nil {
		t.Fatalf("webhook body is not JSON: %v: %s", err, hook[0].Body)
	}
	if ev.ID != "ev-7" || ev.Type != events.ProgressRolledBack || ev.Trigger != "on-rollout-rolled-back" ||
		ev.Data.Candidate != "hello-00002" || ev.Data.Sequence != 7 {
		t.Errorf("webhook event = %+v", ev)
	}
}

func TestSubscriptionsPickTheTrigger(t *testing.T) {
	srv := testkit.NewChat(t)
	cm, secret := config(srv.URL)
	cm.Data["template.rollout-step"] = "message: 'step {{.rollout.step}} of {{.target}}'"
	n := New(factory(t, cm, secret), targets{"shop/hello": {nil, {
		// No trigger: the default triggers (outcomes and pauses, not steps).
		AnnotationPrefix + "/subscribe.slack":                 "all",
		AnnotationPrefix + "/subscribe.on-rollout-step.slack": "steps",
		"sluice.dev/steps":                                    "10,50,100", // not a subscription
	}}}, slog.New(slog.DiscardHandler))
	step := rolledBack("ev-3")
	step.Type, step.Data.Step, step.Data.Weight = events.ProgressStep, 2, 50
	n.notify(context.Background(), step)
	n.notify(context.Background(), rolledBack("ev-7"))

	var got []string
	for _, r := range srv.Requests() {
		got = append(got, r.Form.Get("channel")+": "+r.Form.Get("text")[:min(27, len(r.Form.Get("text")))])
	}
	want := []string{"steps: step 2 of shop/hello", "all: shop/hello: hello-00002 rol"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sent\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNothingConfiguredSendsNothing(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "other", Namespace: "sluice-system"}
	n := New(factory(t, &corev1.ConfigMap{ObjectMeta: meta}, &corev1.Secret{ObjectMeta: meta}), targets{},
		slog.New(slog.DiscardHandler))
	if n.Configured() {
		t.Error("Configured() = true without the ConfigMap")
	}
}

func TestBuiltinCoversEveryTrigger(t *testing.T) {
	b, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range Triggers() {
		if _, ok := b.Triggers[tr]; !ok && tr != Trigger(events.ProgressAnalysis) {
			t.Errorf("no built-in trigger %s", tr)
		}
	}
	for name, conds := range b.Triggers {
		for _, c := range conds {
			for _, tmpl := range c.Send {
				if _, ok := b.Templates[tmpl]; !ok {
					t.Errorf("trigger %s sends template %s, which does not exist", name, tmpl)
				}
			}
		}
	}
	if _, err := api.NewAPI(*b, func(o map[string]any, _ services.Destination) map[string]any { return o }); err != nil {
		t.Errorf("built-in templates do not compile: %v", err)
	}
}

func TestTriggerConditionNarrows(t *testing.T) {
	srv := testkit.NewChat(t)
	cm, secret := config(srv.URL)
	// As docs/notifications.md shows: only pauses by analysis.
	cm.Data["trigger.on-rollout-paused"] = "- when: rollout.by == 'sluice analysis'\n  send: [rollout-paused]\n"
	n := New(factory(t, cm, secret), targets{"shop/hello": {nil, {AnnotationPrefix + "/subscribe.on-rollout-paused.slack": "deploys"}}},
		slog.New(slog.DiscardHandler))
	for i, by := range []string{"alice", "sluice analysis"} {
		p := rolledBack(fmt.Sprint("ev-p", i))
		p.Type, p.Data.By, p.Data.Reason = events.ProgressPaused, by, "why"
		n.notify(context.Background(), p)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || !strings.Contains(reqs[0].Form.Get("text"), "paused at 0% by sluice analysis: why") {
		t.Errorf("sent %+v; want the pause by analysis alone", reqs)
	}
}
