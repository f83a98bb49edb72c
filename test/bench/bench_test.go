package main

import (
	"os"
	"os/exec"
	"testing"
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func TestStatsByNearestRank(t *testing.T) {
	var v []float64
	for i := 100; i >= 1; i-- {
		v = append(v, float64(i))
	}
	s := stats(v)
	if s.N != 100 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 {
		t.Errorf("stats(1..100) = %+v", s)
	}
	if s := stats(nil); s.N != 0 || s.P99 != 0 {
		t.Errorf("stats(nil) = %+v", s)
	}
}

func TestWeights(t *testing.T) {
	if got := stepsAnnotation(4); got != "25,50,75,100" {
		t.Errorf("4 steps: %s", got)
	}
	if got := stepsAnnotation(3); got != "33,66,100" {
		t.Errorf("3 steps: %s", got)
	}
}

func TestParseRuns(t *testing.T) {
	runs, err := parseRuns("10, 100", "100x8", "100", "25", 4, time.Second)
	if err != nil || len(runs) != 5 || runs[1].Rollouts != 100 || runs[1].Steps != 4 || runs[2].Workers != 2 ||
		runs[3].Rollouts != 25 || !runs[3].NoRolloutResources || runs[3].Label() != "25 × 4, no Rollout resources" ||
		runs[4].Steps != 8 || runs[4].Workers != 1 || runs[4].NoRolloutResources {
		t.Fatalf("runs %+v, %v", runs, err)
	}
	for _, bad := range [][2]string{{"ten", ""}, {"0", ""}, {"10", "100y8"}} {
		if _, err := parseRuns(bad[0], bad[1], "", "", 4, time.Second); err == nil {
			t.Errorf("%q %q: no error", bad[0], bad[1])
		}
	}
}

// auditPatch builds a traffic patch as the audit log records it.
func auditPatch(user, svc string, at time.Time, candidate int64) auditEvent {
	e := auditEvent{Verb: "patch", Received: at}
	e.User.Username = user
	e.ObjectRef.Resource, e.ObjectRef.Name = "services", svc
	e.ResponseStatus.Code = 200
	stable := 100 - candidate
	e.Traffic = []servingv1.TrafficTarget{{RevisionName: svc + "-00001", Percent: &stable}, {RevisionName: svc + "-00002", Percent: &candidate}}
	return e
}

// The pin (0% to the candidate), other users' patches, patches outside the
// window and failed ones are not steps; the gaps less the hold are the overhead.
func TestStepOverheadFromAudit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	failed := auditPatch(workerUser, "b-0000", at(1500), 25)
	failed.ResponseStatus.Code = 409
	audit := []auditEvent{
		auditPatch(workerUser, "b-0000", at(100), 0), // pin
		auditPatch(workerUser, "b-0000", at(1000), 25),
		failed,
		auditPatch("admin", "b-0000", at(1800), 40),
		auditPatch(workerUser, "b-0000", at(2300), 50),
		auditPatch(workerUser, "b-0000", at(3500), 100),
		auditPatch(workerUser, "b-0000", at(99000), 100), // after the window
	}
	patches := stepPatches(audit, workerUser, t0, at(10000))
	if n := len(patches["b-0000"]); n != 3 {
		t.Fatalf("%d step patches, want 3: %v", n, patches)
	}
	got := stats(gaps(patches, time.Second))
	if got.N != 2 || got.P50 != 200 || got.Max != 300 {
		t.Errorf("overheads %+v, want 300 ms and 200 ms", got)
	}
}

// Flagger's Knative provider updates the whole Service: the canary's share
// on latestRevision beside its named primary, then the new primary named at
// 100%. Its first write, which only annotates, and a Service that only
// follows its latest Revision are not steps.
func TestFlaggerWritesAreSteps(t *testing.T) {
	yes, hundred, ten, ninety, zero := true, int64(100), int64(10), int64(90), int64(0)
	write := func(targets ...servingv1.TrafficTarget) auditEvent {
		e := auditEvent{Verb: "update"}
		e.ObjectRef.Name = "g-0000"
		e.Traffic = targets
		return e
	}
	for _, tc := range []struct {
		e    auditEvent
		want int64
	}{
		{write(servingv1.TrafficTarget{LatestRevision: &yes, Percent: &hundred}), 0},
		{write(servingv1.TrafficTarget{LatestRevision: &yes, Percent: &ten}, servingv1.TrafficTarget{RevisionName: "g-0000-00001", Percent: &ninety}), 10},
		{write(servingv1.TrafficTarget{LatestRevision: &yes, Percent: &zero}, servingv1.TrafficTarget{RevisionName: "g-0000-00002", Percent: &hundred}), 100},
	} {
		if got, _ := candidatePercent(tc.e); got != tc.want {
			t.Errorf("%+v: %d%%, want %d%%", tc.e.Traffic, got, tc.want)
		}
	}
}

func TestSampleSplitsResidentMemory(t *testing.T) {
	s := sample(os.Getpid())
	if s.cpu <= 0 || s.hwmKiB <= 0 || s.anonKiB <= 0 || s.fileKiB <= 0 || s.anonKiB+s.fileKiB > s.hwmKiB+1024 {
		t.Fatalf("this process: %+v", s)
	}
}

// Two processes of one binary share its pages: their summed PSS is less than
// their summed RSS, which counts those pages twice.
func TestPeakPSSCountsSharedPagesOnce(t *testing.T) {
	var pids []int
	for range 2 {
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pids = append(pids, cmd.Process.Pid)
	}
	time.Sleep(200 * time.Millisecond)
	stop := peakPSS(pids, 50*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	pss := stop()
	var rss float64
	for _, pid := range pids {
		s := sample(pid)
		rss += s.anonKiB + s.fileKiB
	}
	if pss <= 0 || pss >= rss {
		t.Fatalf("summed PSS %.0f KiB, summed RSS %.0f KiB: want 0 < PSS < RSS", pss, rss)
	}
	// The sum is of both processes, not of one.
	for _, pid := range pids {
		if one := pssKiB(pid); one <= 0 || one >= pss {
			t.Fatalf("process %d alone: PSS %.0f KiB, the sum %.0f KiB", pid, one, pss)
		}
	}
}
