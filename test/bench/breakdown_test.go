package main

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Two steps: each part of the gap between them lands in its own figure.
func TestStepBreakdownSplitsTheGap(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	at := func(ms int) *timestamppb.Timestamp {
		return timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	ev := func(id int64, ms int, typ enumspb.EventType) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: id, EventTime: at(ms), EventType: typ}
	}
	scheduled := func(id int64, ms int) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{ActivityType: &commonpb.ActivityType{Name: api.ActivityApplyTraffic}}}
		return e
	}
	started := func(id int64, ms int, of int64) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{ScheduledEventId: of}}
		return e
	}
	completed := func(id int64, ms int, of int64) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{ScheduledEventId: of}}
		return e
	}
	timer := ev(6, 1300, enumspb.EVENT_TYPE_TIMER_STARTED)
	timer.Attributes = &historypb.HistoryEvent_TimerStartedEventAttributes{TimerStartedEventAttributes: &historypb.TimerStartedEventAttributes{StartToFireTimeout: durationpb.New(10 * time.Second)}}
	timer.UserMetadata = &sdkpb.UserMetadata{Summary: &commonpb.Payload{Data: []byte(`"hold 10s at 10%"`)}}
	events := []*historypb.HistoryEvent{
		ev(1, 0, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
		scheduled(2, 40), started(3, 50, 2), completed(5, 1250, 2), // write and verify 1200
		timer, // decide 50
		ev(7, 11320, enumspb.EVENT_TYPE_TIMER_FIRED),                       // 20 late
		scheduled(8, 11390), started(9, 11420, 8), completed(10, 11600, 8), // dispatch 70, queue 30
	}
	ready := &readyLog{at: map[string]time.Time{"s-0000-00002": t0.Add(-5 * time.Millisecond)}}
	b := stepBreakdown([]history{{service: "s-0000", events: events}}, ready)
	for name, got := range map[string]Stats{"decide": b.Decide, "timer late": b.TimerLate, "dispatch": b.Dispatch, "queue": b.Queue,
		"ready→told": b.ReadyToTold, "told→scheduled": b.ToldToSchedule, "first queue": b.FirstQueue} {
		want := map[string]float64{"decide": 50, "timer late": 20, "dispatch": 70, "queue": 30, "ready→told": 5, "told→scheduled": 40, "first queue": 10}[name]
		if got.N != 1 || got.P50 != want {
			t.Errorf("%s: %+v, want one of %v ms", name, got, want)
		}
	}
	if b.Write.N != 2 || b.Write.Max != 1200 {
		t.Errorf("write and verify: %+v, want 1200 and 180 ms", b.Write)
	}

	// The audit log: the first write's patch arrives 70 ms after a worker
	// started it, after a read the API server answered in 40 ms; another
	// user's read does not count.
	read := auditEvent{Verb: "get", Received: t0.Add(55 * time.Millisecond), Done: t0.Add(95 * time.Millisecond)}
	read.User.Username, read.ObjectRef.Resource = workerUser, "revisions"
	other := read
	other.User.Username = "admin"
	other.Done = t0.Add(time.Second)
	patch := auditPatch(workerUser, "s-0000", t0.Add(120*time.Millisecond), 10)
	patch.Done = patch.Received.Add(15 * time.Millisecond)
	// The second write, started at 11420 ms: its read of the Service
	// arrives 5 ms later, its patch 30 ms later.
	serviceRead := auditEvent{Verb: "get", Received: t0.Add(11425 * time.Millisecond), Done: t0.Add(11428 * time.Millisecond)}
	serviceRead.User.Username, serviceRead.ObjectRef.Resource, serviceRead.ObjectRef.Name = workerUser, "services", "s-0000"
	second := auditPatch(workerUser, "s-0000", t0.Add(11450*time.Millisecond), 20)
	second.Done = second.Received.Add(15 * time.Millisecond)
	b.withAudit([]auditEvent{read, other, patch, serviceRead, second}, workerUser, t0, t0.Add(time.Minute))
	if b.WorkerReads.N != 2 || b.WorkerReads.Max != 40 || b.WorkerPatches.N != 2 || b.WorkerPatches.Max != 15 {
		t.Errorf("the API server's answers: reads %+v, want 3 and 40 ms; patches %+v, want two of 15 ms", b.WorkerReads, b.WorkerPatches)
	}
	for name, got := range map[string]Stats{"own": b.FirstOwn, "step to read": b.StepToRead, "step own": b.StepOwn} {
		want := map[string]float64{"own": 70, "step to read": 5, "step own": 30}[name]
		if got.N != 1 || got.P50 != want {
			t.Errorf("%s: %+v, want one of %v ms", name, got, want)
		}
	}
}
