package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
)

// workerUser is who sluice's worker is to the API server: the
// ServiceAccount config/deploy gives it.
const workerUser = "system:serviceaccount:sluice-system:sluice-worker"

// readAudit reads, from the API server's audit log, sluice's writes of
// Services the API server took, and when each Revision's status first
// said Ready.
func readAudit(path string) ([]write, map[string]time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("the API server's audit log: %w", err)
	}
	defer f.Close()
	var writes []write
	ready := map[string]time.Time{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 8<<20), 8<<20)
	for line := 1; sc.Scan(); line++ {
		var e auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// A line the API server was killed in the middle of writing.
			continue
		}
		if e.Stage != auditv1.StageResponseComplete || e.ObjectRef == nil || e.ResponseStatus == nil ||
			e.ResponseStatus.Code >= 300 || e.RequestObject == nil || (e.Verb != "patch" && e.Verb != "update") {
			continue
		}
		switch {
		case e.ObjectRef.Resource == "revisions" && e.ObjectRef.Subresource == "status":
			var rev servingv1.Revision
			if err := json.Unmarshal(e.RequestObject.Raw, &rev); err != nil {
				return nil, nil, fmt.Errorf("audit log line %d: %w", line, err)
			}
			if at, seen := ready[e.ObjectRef.Name]; rev.Status.GetCondition(apis.ConditionReady).IsTrue() && (!seen || e.StageTimestamp.Time.Before(at)) {
				ready[e.ObjectRef.Name] = e.StageTimestamp.Time
			}
		case e.ObjectRef.Resource == "services" && e.ObjectRef.Subresource == "" && e.User.Username == workerUser:
			var body struct {
				Spec struct {
					Traffic []servingv1.TrafficTarget `json:"traffic"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(e.RequestObject.Raw, &body); err != nil {
				return nil, nil, fmt.Errorf("audit log line %d: %w", line, err)
			}
			writes = append(writes, write{Service: e.ObjectRef.Name, At: e.RequestReceivedTimestamp.Time, AuditID: string(e.AuditID),
				Traffic: body.Spec.Traffic, HasTraffic: len(body.Spec.Traffic) > 0})
		}
	}
	sort.SliceStable(writes, func(i, j int) bool { return writes[i].At.Before(writes[j].At) })
	return writes, ready, sc.Err()
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
