package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/test/stack"
)

// StepBreakdown splits sluice's gap between two steps into its parts, read
// from the rollouts' Temporal histories (server times), in milliseconds:
//   - Write: ApplyTraffic started → completed: the patch, then the watch
//     until Knative's status shows the traffic.
//   - Decide: ApplyTraffic completed → the hold's timer started: a workflow
//     task.
//   - TimerLate: the hold's timer fired later than it was set for.
//   - Dispatch: the timer fired → the next ApplyTraffic scheduled: a
//     workflow task.
//   - Queue: the next ApplyTraffic scheduled → started: an activity task
//     waiting for a worker.
//
// What is left of the gap is the next write's own time before its patch
// reaches the API server.
type StepBreakdown struct {
	Write     Stats `json:"write_and_verify_ms"`
	Decide    Stats `json:"decide_ms"`
	TimerLate Stats `json:"timer_late_ms"`
	Dispatch  Stats `json:"dispatch_ms"`
	Queue     Stats `json:"queue_ms"`
	// Every workflow task of the rollouts: scheduled → started (waiting
	// for a worker's poll) and started → completed (the worker's work,
	// and its answer's way back).
	TaskWait Stats `json:"workflow_task_wait_ms"`
	TaskRun  Stats `json:"workflow_task_run_ms"`
	// The first write, from the candidate Ready (the bench's watch) to
	// the history event that told the rollout (the receiver's signal or
	// the rollout's watch completing), then to the first traffic write
	// scheduled, then to a worker starting it.
	ReadyToTold    Stats `json:"ready_to_told_ms"`
	ToldToSchedule Stats `json:"told_to_first_write_scheduled_ms"`
	FirstQueue     Stats `json:"first_write_queue_ms"`
	// FirstOwn: a worker started the first write → its patch arrived at
	// the API server (the audit log): the write's own reads first.
	// WorkerReads and WorkerPatches: how long the API server took to
	// answer the worker's reads and traffic patches of Services and
	// Revisions in the window (the audit log's received → response
	// complete).
	FirstOwn Stats `json:"first_write_own_ms"`
	// StepToRead and StepOwn: for every later write, a worker started it
	// → its first read of the Service arrived at the API server, and → its
	// patch arrived there. They are the part of each step's gap that is the
	// write's own, before Knative has anything to do.
	StepToRead    Stats `json:"step_write_to_read_ms"`
	StepOwn       Stats `json:"step_write_own_ms"`
	WorkerReads   Stats `json:"worker_read_latency_ms"`
	WorkerPatches Stats `json:"worker_patch_latency_ms"`
	// firstStarted is when a worker started each Service's first write;
	// laterStarted when it started each of the later ones.
	firstStarted map[string]time.Time
	laterStarted map[string][]time.Time
}

// withAudit adds what only the audit log knows: the first write's own time
// before its patch, and the API server's latency for the worker's
// requests, in [from, to].
func (b *StepBreakdown) withAudit(audit []auditEvent, user string, from, to time.Time) {
	var own, reads, patches, toRead, stepOwn []float64
	patched := stepPatches(audit, user, from, to)
	for name, ts := range patched {
		if at, ok := b.firstStarted[name]; ok && len(ts) > 0 {
			own = append(own, ms(ts[0].Sub(at)))
		}
	}
	serviceReads := map[string][]time.Time{}
	for _, e := range audit {
		if e.User.Username == user && e.Verb == "get" && e.ObjectRef.Resource == "services" && e.ObjectRef.Subresource == "" &&
			!e.Received.Before(from) && !e.Received.After(to) {
			serviceReads[e.ObjectRef.Name] = append(serviceReads[e.ObjectRef.Name], e.Received)
		}
	}
	for name, starts := range b.laterStarted {
		for _, at := range starts {
			p, ok := firstAfter(patched[name], at)
			if !ok {
				continue // the write found the traffic there already
			}
			stepOwn = append(stepOwn, ms(p.Sub(at)))
			if r, ok := firstAfter(serviceReads[name], at); ok && !r.After(p) {
				toRead = append(toRead, ms(r.Sub(at)))
			}
		}
	}
	for _, e := range audit {
		if e.User.Username != user || e.Received.Before(from) || e.Received.After(to) || e.Done.IsZero() ||
			(e.ObjectRef.Resource != "services" && e.ObjectRef.Resource != "revisions") || e.ObjectRef.Subresource != "" {
			continue
		}
		switch e.Verb {
		case "get":
			reads = append(reads, ms(e.Done.Sub(e.Received)))
		case "patch":
			patches = append(patches, ms(e.Done.Sub(e.Received)))
		}
	}
	b.FirstOwn, b.WorkerReads, b.WorkerPatches = stats(own), stats(reads), stats(patches)
	b.StepToRead, b.StepOwn = stats(toRead), stats(stepOwn)
}

// firstAfter is the first of ts (in order) at or after at.
func firstAfter(ts []time.Time, at time.Time) (time.Time, bool) {
	for _, t := range ts {
		if !t.Before(at) {
			return t, true
		}
	}
	return time.Time{}, false
}

// text is the breakdown as the bench prints it under a level.
func (b *StepBreakdown) text() string {
	return fmt.Sprintf("  - first write: Ready → told %.0f / %.0f, told → scheduled %.0f / %.0f, queue %.0f / %.0f, started → its patch %.0f / %.0f; the API server answered the worker's reads in %.0f / %.0f, its patches in %.0f / %.0f\n"+
		"  - write and verify %.0f / %.0f, decide %.0f / %.0f, timer late %.0f / %.0f, dispatch %.0f / %.0f, queue %.0f / %.0f; workflow tasks: wait %.0f / %.0f, run %.0f / %.0f\n"+
		"  - a later step's write: started → its read of the Service %.0f / %.0f, → its patch %.0f / %.0f\n",
		b.ReadyToTold.P50, b.ReadyToTold.P99, b.ToldToSchedule.P50, b.ToldToSchedule.P99, b.FirstQueue.P50, b.FirstQueue.P99,
		b.FirstOwn.P50, b.FirstOwn.P99, b.WorkerReads.P50, b.WorkerReads.P99, b.WorkerPatches.P50, b.WorkerPatches.P99,
		b.Write.P50, b.Write.P99, b.Decide.P50, b.Decide.P99, b.TimerLate.P50, b.TimerLate.P99, b.Dispatch.P50, b.Dispatch.P99,
		b.Queue.P50, b.Queue.P99, b.TaskWait.P50, b.TaskWait.P99, b.TaskRun.P50, b.TaskRun.P99,
		b.StepToRead.P50, b.StepToRead.P99, b.StepOwn.P50, b.StepOwn.P99)
}

// stepBreakdown measures the rollouts' steps from their histories.
func stepBreakdown(hists []history, ready *readyLog) StepBreakdown {
	var write, decide, late, dispatch, queue, taskWait, taskRun, readyTold, toldSchedule, firstQueue []float64
	firstStarted, laterStarted := map[string]time.Time{}, map[string][]time.Time{}
	for _, h := range hists {
		type act struct{ scheduled, started, completed time.Time }
		applies := map[int64]*act{} // by scheduled event ID
		var timerStarted time.Time
		var timerFor time.Duration
		var fired time.Time
		var last *act
		var taskScheduled, taskStarted, told time.Time
		awaits := map[int64]bool{} // AwaitRevision activities, by scheduled event ID
		var first *act
		for _, ev := range h.events {
			at := ev.GetEventTime().AsTime()
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
				taskScheduled = at
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				taskStarted = at
				taskWait = append(taskWait, ms(at.Sub(taskScheduled)))
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				taskRun = append(taskRun, ms(at.Sub(taskStarted)))
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
				told = at
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				name := ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
				if name == api.ActivityAwaitRevision {
					awaits[ev.GetEventId()] = true
				}
				if name != api.ActivityApplyTraffic {
					continue
				}
				a := &act{scheduled: at}
				applies[ev.GetEventId()] = a
				if first == nil {
					first = a
					if !told.IsZero() {
						toldSchedule = append(toldSchedule, ms(at.Sub(told)))
						if r, ok := ready.get(h.service + "-00002"); ok {
							readyTold = append(readyTold, ms(told.Sub(r)))
						}
					}
				}
				if !fired.IsZero() && last != nil {
					dispatch = append(dispatch, ms(at.Sub(fired)))
				}
				fired = time.Time{}
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				if a := applies[ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]; a != nil {
					a.started = at
					switch {
					case last != nil:
						queue = append(queue, ms(at.Sub(a.scheduled)))
						laterStarted[h.service] = append(laterStarted[h.service], at)
					case a == first:
						firstQueue = append(firstQueue, ms(at.Sub(a.scheduled)))
						firstStarted[h.service] = at
					}
				}
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				if awaits[ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()] {
					told = at
				}
				if a := applies[ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]; a != nil {
					a.completed = at
					write = append(write, ms(at.Sub(a.started)))
					last = a
					timerStarted = time.Time{}
				}
			case enumspb.EVENT_TYPE_TIMER_STARTED:
				// The hold's timer, by its summary ("hold 10s at 20%"),
				// not a wait for status.
				d := ev.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration()
				isHold := strings.Contains(string(ev.GetUserMetadata().GetSummary().GetData()), "hold ")
				if last != nil && timerStarted.IsZero() && isHold {
					timerStarted, timerFor = at, d
					decide = append(decide, ms(at.Sub(last.completed)))
				}
			case enumspb.EVENT_TYPE_TIMER_FIRED:
				if !timerStarted.IsZero() && fired.IsZero() {
					fired = at
					late = append(late, ms(at.Sub(timerStarted)-timerFor))
				}
			}
		}
	}
	return StepBreakdown{Write: stats(write), Decide: stats(decide), TimerLate: stats(late), Dispatch: stats(dispatch), Queue: stats(queue),
		TaskWait: stats(taskWait), TaskRun: stats(taskRun),
		ReadyToTold: stats(readyTold), ToldToSchedule: stats(toldSchedule), FirstQueue: stats(firstQueue), firstStarted: firstStarted, laterStarted: laterStarted}
}

// cpuByProcess is the CPU seconds each of the stack's processes used
// between two samples, with the bench itself (which hosts the stand-ins
// below Knative) as "bench".
func cpuByProcess(stk *stack.Stack) map[string]float64 {
	out := map[string]float64{"bench": sample(os.Getpid()).cpu}
	for name, pid := range stk.ProcessPids() {
		out[name] = sample(pid).cpu
	}
	return out
}

// cpuUsed is what each process used from before to after, largest first,
// as "name 12.3 s".
func cpuUsed(before, after map[string]float64) (map[string]float64, string) {
	used := map[string]float64{}
	var names []string
	for name, v := range after {
		if d := v - before[name]; d >= 0.05 {
			used[name] = round(d, 1)
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return used[names[i]] > used[names[j]] })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.1f s", n, used[n])
	}
	return used, strings.Join(parts, ", ")
}

// busy is the share of the machine's cores the processes used together
// over the window.
func busy(used map[string]float64, window time.Duration) float64 {
	total := 0.0
	for _, v := range used {
		total += v
	}
	if window <= 0 {
		return 0
	}
	return round(total/window.Seconds()/float64(runtime.NumCPU()), 2)
}
