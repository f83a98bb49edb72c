package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/test/testkit"
)

// workerUser is who sluice's worker is to the API server: the
// ServiceAccount config/deploy gives it.
const workerUser = "system:serviceaccount:sluice-system:sluice-worker"

// audit is what the API server's audit log says.
type audit struct {
	// Writes are sluice's writes of Services the API server took, in order.
	Writes []write
	// Ready is when each Revision's status first said Ready.
	Ready map[string]time.Time
	// Pods are each Revision's pod counts, from its Deployment's status
	// writes, in order.
	Pods map[string][]podCount
	// Counted are each Revision's Ready pods as Knative counted them (its
	// status's actualReplicas, from the pods themselves), in order.
	Counted map[string][]podCount
	// Bounded says, for each Revision created, whether sluice's admission
	// webhook bounded it in the write that created it.
	Bounded map[string]bool
}

// podCount is a Revision's pods at a moment: running and Ready.
type podCount struct {
	At             time.Time
	Running, Ready int32
}

// readAudit reads the API server's audit log.
func readAudit(path string) (audit, error) {
	a := audit{Ready: map[string]time.Time{}, Pods: map[string][]podCount{}, Counted: map[string][]podCount{}, Bounded: map[string]bool{}}
	err := testkit.ScanAudit(path, func(e *auditv1.Event) error {
		// A 504 to sluice's write is the API server giving up on waiting
		// for etcd: the write may well have been committed (sluice's next
		// read finds out), so it counts as written.
		timedOut := e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusGatewayTimeout &&
			e.ObjectRef != nil && e.ObjectRef.Resource == "services" && e.User.Username == workerUser
		if e.ObjectRef == nil || e.ResponseStatus == nil || (e.ResponseStatus.Code >= 300 && !timedOut) || e.RequestObject == nil {
			return nil
		}
		return a.add(e)
	})
	if err != nil {
		return a, err
	}
	sort.SliceStable(a.Writes, func(i, j int) bool { return a.Writes[i].At.Before(a.Writes[j].At) })
	for _, byRevision := range []map[string][]podCount{a.Pods, a.Counted} {
		for _, counts := range byRevision {
			sort.SliceStable(counts, func(i, j int) bool { return counts[i].At.Before(counts[j].At) })
		}
	}
	return a, nil
}

func (a *audit) add(e *auditv1.Event) error {
	ref, at := e.ObjectRef, e.StageTimestamp.Time
	switch {
	case e.Verb == "create" && ref.Resource == "revisions" && ref.Subresource == "":
		if e.ResponseObject == nil {
			return nil
		}
		var rev servingv1.Revision
		if err := json.Unmarshal(e.ResponseObject.Raw, &rev); err != nil {
			return err
		}
		_, a.Bounded[rev.Name] = rev.Annotations[config.AnnotationTemplateScale]
	case e.Verb != "patch" && e.Verb != "update":
	case ref.Resource == "deployments" && ref.Subresource == "status":
		var d appsv1.Deployment
		if err := json.Unmarshal(e.RequestObject.Raw, &d); err != nil {
			return err
		}
		if rev := d.Labels[serving.RevisionLabelKey]; rev != "" {
			a.Pods[rev] = append(a.Pods[rev], podCount{At: at, Running: d.Status.Replicas, Ready: d.Status.ReadyReplicas})
		}
	case ref.Resource == "revisions" && ref.Subresource == "status":
		var rev servingv1.Revision
		if err := json.Unmarshal(e.RequestObject.Raw, &rev); err != nil {
			return err
		}
		if seen, ok := a.Ready[ref.Name]; rev.Status.GetCondition(apis.ConditionReady).IsTrue() && (!ok || at.Before(seen)) {
			a.Ready[ref.Name] = at
		}
		if n := rev.Status.ActualReplicas; n != nil {
			a.Counted[ref.Name] = append(a.Counted[ref.Name], podCount{At: at, Ready: *n})
		}
	case ref.Resource == "services" && ref.Subresource == "" && e.User.Username == workerUser:
		traffic, ok := testkit.TrafficOf(e)
		a.Writes = append(a.Writes, write{Service: ref.Name, At: e.RequestReceivedTimestamp.Time, AuditID: string(e.AuditID),
			Traffic: traffic, HasTraffic: ok})
	}
	return nil
}

// podsAt is the last of a Revision's pod counts at or before t (none before
// its Deployment's first status write).
func podsAt(counts []podCount, t time.Time) podCount {
	var last podCount
	for _, c := range counts {
		if c.At.After(t) {
			break
		}
		last = c
	}
	return last
}

// readRuns lists every run of every Service's rollout workflow.
func readRuns(ctx context.Context, c client.Client) ([]run, error) {
	const prefix = "rollout/default/service/"
	var out []run
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId STARTS_WITH '%s'", prefix), NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, fmt.Errorf("list the rollouts' runs: %w", err)
		}
		for _, e := range resp.Executions {
			r := run{Service: strings.TrimPrefix(e.Execution.WorkflowId, prefix), RunID: e.Execution.RunId, Start: e.StartTime.AsTime()}
			if e.CloseTime != nil {
				r.Close = e.CloseTime.AsTime()
			}
			out = append(out, r)
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return out, nil
		}
	}
}

// readTraffic reads each Service's spec.traffic.
func readTraffic(ctx context.Context, serving servingclient.Interface) (map[string][]servingv1.TrafficTarget, error) {
	list, err := serving.ServingV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string][]servingv1.TrafficTarget{}
	for _, s := range list.Items {
		out[s.Name] = s.Spec.Traffic
	}
	return out, nil
}
