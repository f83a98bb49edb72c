package workflows

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	by := Command{By: "ops"}
	tests := []struct {
		name  string
		state state
		cmd   string
		in    Command
		want  string // substring of the rejection; empty means accepted
	}{
		{"promote while holding", state{Phase: PhaseHolding}, CommandPromote, by, ""},
		{"promote at a gate", state{Phase: PhaseGate}, CommandPromote, by, ""},
		{"promote twice", state{Phase: PhaseHolding, PromoteRequested: true}, CommandPromote, by, "already pending"},
		{"promote while paused", state{Phase: PhaseHolding, Pause: &pause{Cause: pausedByCommand, Reason: "paused by x"}}, CommandPromote, by, "resume it first"},
		{"promote before ready", state{Phase: PhaseWaitingReady, Candidate: "c"}, CommandPromote, by, "not Ready yet"},
		{"promote after the end", state{Phase: PhaseSucceeded, Outcome: OutcomeSucceeded}, CommandPromote, by, "has finished"},
		{"promote during rollback", state{Phase: PhaseRollingBack, Reason: "deadline"}, CommandPromote, by, "rolling back (deadline)"},
		{"promote-full while waiting", state{Phase: PhaseWaitingReady}, CommandPromoteFull, by, ""},
		{"promote-full twice", state{Phase: PhaseHolding, PromoteFull: true}, CommandPromoteFull, by, "already promoting"},
		{"pause", state{Phase: PhaseHolding}, CommandPause, by, ""},
		{"pause twice", state{Phase: PhaseHolding, Pause: &pause{Cause: pausedByCommand}}, CommandPause, by, "already paused"},
		{"resume when not paused", state{Phase: PhaseHolding}, CommandResume, by, "not paused"},
		{"resume", state{Phase: PhaseHolding, Pause: &pause{Cause: pausedByCommand}}, CommandResume, by, ""},
		{"abort without reason", state{Phase: PhaseHolding}, CommandAbort, by, "give a reason"},
		{"abort", state{Phase: PhaseHolding}, CommandAbort, Command{By: "ops", Reason: "errors"}, ""},
		{"anonymous", state{Phase: PhaseHolding}, CommandPause, Command{}, "say who"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &rollout{st: tt.state}
			err := r.validate(tt.cmd, tt.in)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want a rejection containing %q", err, tt.want)
			}
		})
	}
}
