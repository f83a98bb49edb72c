package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/notify"
	"github.com/sluicehq/sluice/test/testkit"
)

// notifications configures the worker's notifications, as a platform team
// would: Slack, Teams and a webhook, all reaching a stand-in server, in the
// sluice-notifications ConfigMap and Secret of sluice's namespace. It
// returns the stand-in and the annotations that subscribe a Service to
// rollbacks on all three.
func notifications(t *testing.T) (*testkit.Chat, map[string]string) {
	t.Helper()
	chat := testkit.NewChat(t)
	ctx := context.Background()
	meta := metav1.ObjectMeta{Name: notify.ConfigName, Namespace: "sluice-system"}
	cm := &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{
		"service.slack":         "token: $slack-token\napiURL: " + chat.URL + "/api/\n",
		"service.teams":         "recipientUrls:\n  oncall: " + chat.URL + "/teams/oncall\n",
		"service.webhook.audit": "url: " + chat.URL + "/audit\nheaders:\n- {name: Content-Type, value: application/json}\n",
	}}
	secret := &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"slack-token": "xoxb-stand-in"}}
	kube := stk.Kube()
	if _, err := kube.CoreV1().Secrets(meta.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps(meta.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().ConfigMaps(meta.Namespace).Delete(ctx, meta.Name, metav1.DeleteOptions{})
		_ = kube.CoreV1().Secrets(meta.Namespace).Delete(ctx, meta.Name, metav1.DeleteOptions{})
	})
	sub := notify.AnnotationPrefix + "/subscribe.on-rollout-rolled-back."
	return chat, map[string]string{sub + "slack": "deploys", sub + "teams": "oncall", sub + "audit": "rollbacks"}
}

// checkRollbackNotified checks that one rollback reached each service once:
// one Slack message, one Teams card, one webhook call.
func checkRollbackNotified(t *testing.T, chat *testkit.Chat, name, candidate string) {
	t.Helper()
	var slack, teams, hook []testkit.ChatRequest
	testkit.Eventually(t, 30*time.Second, 200*time.Millisecond, "the rollback's notifications", func() (bool, string) {
		slack, teams, hook = testkit.Split(chat.Requests())
		return len(slack) >= 1 && len(teams) >= 1 && len(hook) >= 1, ""
	})
	if len(slack) != 1 || len(teams) != 1 || len(hook) != 1 {
		t.Errorf("got %d Slack messages, %d Teams cards, %d webhook calls; want one each: %+v", len(slack), len(teams), len(hook), chat.Requests())
	}
	text := slack[0].Form.Get("text")
	if slack[0].Form.Get("channel") != "deploys" || !strings.HasPrefix(text, ns+"/"+name+": "+candidate+" rolled back to ") {
		t.Errorf("Slack message to %q: %q", slack[0].Form.Get("channel"), text)
	}
	if !strings.Contains(teams[0].Body, `"@type":"MessageCard"`) || !strings.Contains(teams[0].Body, "Rollout rolled back: "+ns+"/"+name) {
		t.Errorf("Teams card: %s", teams[0].Body)
	}
	if !strings.Contains(hook[0].Body, `"type":"dev.sluice.rollout.rolledback"`) || !strings.Contains(hook[0].Body, `"candidate":"`+candidate+`"`) {
		t.Errorf("webhook call: %s", hook[0].Body)
	}
	t.Logf("Slack: %s\nTeams: %s\nwebhook: %s", text, teams[0].Body, hook[0].Body)
}
