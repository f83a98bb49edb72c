package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
)

// Footprint is a process's share of the run: CPU time spent during the
// rollouts, and the most memory it ever held.
type Footprint struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

type procSample struct {
	cpu    float64 // seconds
	hwmKiB float64
	// anonKiB and fileKiB split the resident memory now: the process's own
	// (heap, stacks) and file-backed pages (its binary's code and data,
	// which the processes of one binary on a node share in the page cache).
	anonKiB, fileKiB float64
}

type snap struct {
	worker, receiver procSample
	metrics          map[string]float64 // verb → requests, serving.knative.dev
	receiverTimes    map[string]float64
	throttle         map[string]float64
}

// snapshot reads the processes' use so far; several workers add up.
func snapshot(ctx context.Context, stk *stack.Stack, workerPids []int, receiverPid int) snap {
	var w procSample
	for _, pid := range workerPids {
		s := sample(pid)
		w.cpu += s.cpu
		w.hwmKiB += s.hwmKiB
	}
	return snap{worker: w, receiver: sample(receiverPid), metrics: apiRequests(ctx, stk), receiverTimes: receiverTimes(ctx, stk),
		throttle: scrape(ctx, "http://"+stk.WorkerHTTP+"/metrics", "", "sluice_kube_rate_limiter_wait_seconds_")}
}

// sample reads a process's CPU time (utime+stime, in clock ticks of 1/100 s
// on Linux) and its peak resident set (VmHWM).
func sample(pid int) procSample {
	var s procSample
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name, which is in parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+2:])
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				k, _ := strconv.ParseFloat(f[12], 64)
				s.cpu = (u + k) / 100
			}
		}
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	s.hwmKiB, s.anonKiB, s.fileKiB = kibField(status, "VmHWM:"), kibField(status, "RssAnon:"), kibField(status, "RssFile:")
	return s
}

// procKiB reads one "Key: N kB" line of a /proc file (0 if absent).
func procKiB(path, key string) float64 {
	b, _ := os.ReadFile(path)
	return kibField(b, key)
}

// kibField is the value of the "Key: N kB" line of a /proc file's text.
func kibField(b []byte, key string) float64 {
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kib
		}
	}
	return 0
}

// treeCPU is the CPU time of processes and all their descendants: the live
// ones read one by one, the ended ones from their parents' cutime and
// cstime. PostgreSQL's backends are its postmaster's children, so
// Temporal's production topology is its services' and its database's trees.
func treeCPU(pids []int) float64 {
	var total float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			if f := strings.Fields(string(b)[i+2:]); len(f) > 14 {
				for _, v := range f[11:15] {
					t, _ := strconv.ParseFloat(v, 64)
					total += t / 100
				}
			}
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		var kids []int
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if k, err := strconv.Atoi(f); err == nil {
					kids = append(kids, k)
				}
			}
		}
		total += treeCPU(kids)
	}
	return total
}

func footprint(before, after procSample) Footprint {
	return Footprint{CPUSeconds: round(after.cpu-before.cpu, 2), PeakRSSMiB: round(after.hwmKiB/1024, 1)}
}

// apiRequests reads apiserver_request_total for Knative Serving's kinds from
// the API server's own metrics, summed by verb.
func apiRequests(ctx context.Context, stk *stack.Stack) map[string]float64 {
	out := map[string]float64{}
	for series, v := range scrape(ctx, stk.KubeURL+"/metrics", stk.Rest.BearerToken, "apiserver_request_total{") {
		if strings.Contains(series, `group="serving.knative.dev"`) {
			out[label(series, "verb")] += v
		}
	}
	return out
}

// receiverTimes reads the receiver's own histogram of how long it took to
// answer each event: the sum of seconds and the count, by event type.
func receiverTimes(ctx context.Context, stk *stack.Stack) map[string]float64 {
	out := map[string]float64{}
	for series, v := range scrape(ctx, stk.ReceiverURL+"metrics", "", "sluice_receiver_event_duration_seconds_") {
		switch {
		case strings.HasPrefix(series, "sluice_receiver_event_duration_seconds_sum{"):
			out["sum "+label(series, "type")] += v
		case strings.HasPrefix(series, "sluice_receiver_event_duration_seconds_count{"):
			out["count "+label(series, "type")] += v
		}
	}
	return out
}

// ReceiverLoad is what the receiver answered while the rollouts ran, by
// event type: how many events, and how long each took on average.
type ReceiverLoad struct {
	Events int     `json:"events"`
	MeanMS float64 `json:"mean_ms"`
}

func receiverLoad(before, after map[string]float64) map[string]ReceiverLoad {
	out := map[string]ReceiverLoad{}
	for k, count := range after {
		typ, ok := strings.CutPrefix(k, "count ")
		if !ok {
			continue
		}
		n := count - before[k]
		if n <= 0 {
			continue
		}
		sum := after["sum "+typ] - before["sum "+typ]
		out[strings.TrimPrefix(typ, "dev.knative.apiserver.")] = ReceiverLoad{Events: int(n), MeanMS: round(sum/n*1000, 1)}
	}
	return out
}

// Throttle is how the worker's Kubernetes requests waited in its
// client-side rate limiter (SLUICE_KUBE_QPS, SLUICE_KUBE_BURST) while the
// rollouts ran: requests, mean wait, and how many waited over 100 ms.
type Throttle struct {
	Requests int     `json:"requests"`
	MeanMS   float64 `json:"mean_wait_ms"`
	Over100  int     `json:"waited_over_100ms"`
}

func throttle(before, after map[string]float64) Throttle {
	var t Throttle
	var sum, under float64
	for series, v := range after {
		d := v - before[series]
		switch {
		case strings.HasPrefix(series, "sluice_kube_rate_limiter_wait_seconds_count"):
			t.Requests += int(d)
		case strings.HasPrefix(series, "sluice_kube_rate_limiter_wait_seconds_sum"):
			sum += d
		case strings.HasPrefix(series, "sluice_kube_rate_limiter_wait_seconds_bucket") && label(series, "le") == "0.1":
			under += d
		}
	}
	if t.Requests > 0 {
		t.MeanMS = round(sum/float64(t.Requests)*1000, 2)
		t.Over100 = t.Requests - int(under)
	}
	return t
}

// scrape reads the series of a Prometheus text endpoint that start with prefix.
func scrape(ctx context.Context, url, token, prefix string) map[string]float64 {
	out := map[string]float64{}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		out[line[:i]] += v
	}
	return out
}

// label is one label's value in a series name.
func label(series, name string) string {
	_, rest, ok := strings.Cut(series, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func diffMetrics(before, after map[string]float64) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := int(v - before[k]); d > 0 {
			out[k] = d
		}
	}
	return out
}

// HistoryCost is what the rollouts' Temporal histories hold, per rollout.
type HistoryCost struct {
	EventsPerRollout  float64 `json:"events_per_rollout"`
	ActionsPerRollout float64 `json:"billable_actions_per_rollout"`
	ActionsPerStep    float64 `json:"billable_actions_per_step"`
	// Actions per rollout by kind: start, activity (every attempt), timer,
	// signal, update, search-attributes, marker.
	Actions map[string]float64 `json:"billable_actions_by_kind"`
}

// history is one rollout's Temporal history, read once for every figure
// taken from it.
type history struct {
	service string
	events  []*historypb.HistoryEvent
}

// readHistories reads each Service's rollout history.
func readHistories(ctx context.Context, tc client.Client, svcs []string) ([]history, error) {
	out := make([]history, 0, len(svcs))
	for _, n := range svcs {
		id := api.RolloutID(knative.TargetRef{Namespace: stack.Namespace, Kind: knative.KindService, Name: n})
		it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		h := history{service: n}
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return nil, fmt.Errorf("history of %s: %w", id, err)
			}
			h.events = append(h.events, ev)
		}
		out = append(out, h)
	}
	return out, nil
}

// historyCost counts each rollout's history events and the billable actions
// among them, as Temporal Cloud counts them: a start (or continue-as-new),
// each activity attempt, each timer, signal and update, each search-attribute
// upsert, and each marker other than a version marker. Queries are billable
// too but leave no event; the bench sends none.
func historyCost(hists []history, steps int) HistoryCost {
	kinds := map[string]float64{}
	events := 0
	for _, h := range hists {
		for _, ev := range h.events {
			events++
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				kinds["start"]++
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				kinds["activity"] += float64(max(ev.GetActivityTaskStartedEventAttributes().GetAttempt(), 1))
			case enumspb.EVENT_TYPE_TIMER_STARTED:
				kinds["timer"]++
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
				kinds["signal"]++
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
				kinds["update"]++
			case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
				kinds["search-attributes"]++
			case enumspb.EVENT_TYPE_MARKER_RECORDED:
				if ev.GetMarkerRecordedEventAttributes().GetMarkerName() != "Version" {
					kinds["marker"]++
				}
			}
		}
	}
	n := float64(len(hists))
	if n == 0 {
		return HistoryCost{}
	}
	c := HistoryCost{EventsPerRollout: round(float64(events)/n, 1), Actions: map[string]float64{}}
	total := 0.0
	for k, v := range kinds {
		c.Actions[k] = round(v/n, 2)
		total += v
	}
	c.ActionsPerRollout = round(total/n, 1)
	c.ActionsPerStep = round(total/n/float64(steps), 2)
	return c
}

// auditEvent is the part of a Kubernetes audit event the bench reads.
type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// Traffic is what a write of traffic sent.
	Traffic  []servingv1.TrafficTarget
	Received time.Time
	// Done is when the response was complete.
	Done time.Time
}

func readAudit(path string) ([]auditEvent, error) {
	var out []auditEvent
	err := testkit.ScanAudit(path, func(e *auditv1.Event) error {
		a := auditEvent{Verb: e.Verb, Received: e.RequestReceivedTimestamp.Time}
		if e.Stage == auditv1.StageResponseComplete {
			a.Done = e.StageTimestamp.Time
		}
		a.User.Username = e.User.Username
		if r := e.ObjectRef; r != nil {
			a.ObjectRef.Resource, a.ObjectRef.Subresource, a.ObjectRef.Name = r.Resource, r.Subresource, r.Name
		}
		if e.ResponseStatus != nil {
			a.ResponseStatus.Code = int(e.ResponseStatus.Code)
		}
		if traffic, ok := testkit.TrafficOf(e); ok {
			a.Traffic = traffic
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// candidatePercent is the share a traffic write gives the Service's second
// Revision, and whether the write set traffic at all. sluice names the
// Revision; Flagger's Knative provider gives the canary's share to
// latestRevision beside its primary, named, and once it has promoted it
// names the new primary.
func candidatePercent(e auditEvent) (int64, bool) {
	if len(e.Traffic) == 0 {
		return 0, false
	}
	var latest *int64
	named := false
	for _, t := range e.Traffic {
		if t.RevisionName == e.ObjectRef.Name+"-00002" && t.Percent != nil {
			return *t.Percent, true
		}
		if t.LatestRevision != nil && *t.LatestRevision && t.Percent != nil {
			latest = t.Percent
		}
		named = named || t.RevisionName != ""
	}
	if latest != nil && named {
		return *latest, true
	}
	return 0, true
}

// stepPatches are the times, in order, at which each Service's traffic
// patches giving the second Revision a share arrived, by user.
func stepPatches(audit []auditEvent, user string, from, to time.Time) map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, e := range audit {
		if e.User.Username != user || (e.Verb != "patch" && e.Verb != "update") || e.ObjectRef.Resource != "services" || e.ObjectRef.Subresource != "" ||
			e.ResponseStatus.Code != http.StatusOK || e.Received.Before(from) || e.Received.After(to) {
			continue
		}
		if p, ok := candidatePercent(e); ok && p > 0 {
			out[e.ObjectRef.Name] = append(out[e.ObjectRef.Name], e.Received)
		}
	}
	for _, ts := range out {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	}
	return out
}

// gaps are the step overheads: time between consecutive step patches, less the hold.
func gaps(patches map[string][]time.Time, hold time.Duration) []float64 {
	var out []float64
	for _, ts := range patches {
		for i := 1; i < len(ts); i++ {
			out = append(out, ms(ts[i].Sub(ts[i-1])-hold))
		}
	}
	return out
}

func (res *Result) fromAudit(audit []auditEvent, ready *readyLog, t0, t1, f0, f1 time.Time) {
	sluice := stepPatches(audit, workerUser, t0, t1)
	var trig []float64
	for name, ts := range sluice {
		if at, ok := ready.get(name + "-00002"); ok && len(ts) > 0 {
			trig = append(trig, ms(ts[0].Sub(at)))
		}
	}
	res.Trigger = stats(trig)
	res.Breakdown.withAudit(audit, workerUser, t0, t1)
	res.StepOverhead = stats(gaps(sluice, res.Hold))
	res.Floor = stats(gaps(stepPatches(audit, "admin", f0, f1), res.Hold))
	if res.Floor.P50 > 0 {
		res.RatioP50 = round(res.StepOverhead.P50/res.Floor.P50, 2)
	}
	if res.Floor.P99 > 0 {
		res.RatioP99 = round(res.StepOverhead.P99/res.Floor.P99, 2)
	}

	res.APIByUser = map[string]map[string]int{}
	writes := 0
	for _, e := range audit {
		if e.Received.Before(t0) || e.Received.After(t1) {
			continue
		}
		who := "others"
		switch e.User.Username {
		case workerUser:
			who = "worker"
		case receiverUser:
			who = "receiver"
		}
		if res.APIByUser[who] == nil {
			res.APIByUser[who] = map[string]int{}
		}
		res.APIByUser[who][e.Verb]++
		if who == "worker" && (e.Verb == "patch" || e.Verb == "update" || e.Verb == "create" || e.Verb == "delete") {
			writes++
		}
	}
	res.WorkerWritesPerStep = round(float64(writes)/float64(res.Rollouts*res.Steps), 2)
}

// pssKiB reads a process's proportional set size: its own pages, and each
// page it shares (a binary's code, mapped by every process of it) divided
// by the number of processes that map it. Summed over processes it counts
// a shared page once, as the machine holds it; VmHWM counts it in each.
func pssKiB(pid int) float64 {
	return procKiB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
}

// peakPSS samples the summed PSS of pids every interval until the returned
// stop is called, and stop answers the largest sum seen (KiB). The kernel
// keeps no peak of PSS as it does of RSS, so this one is sampled.
func peakPSS(pids []int, every time.Duration) (stop func() float64) {
	done, result := make(chan struct{}), make(chan float64, 1)
	read := func() float64 {
		var sum float64
		for _, pid := range pids {
			sum += pssKiB(pid)
		}
		return sum
	}
	go func() {
		peak := read()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				result <- max(peak, read())
				return
			case <-t.C:
				peak = max(peak, read())
			}
		}
	}()
	return func() float64 {
		close(done)
		return <-result
	}
}
