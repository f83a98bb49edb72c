package workflows

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	by := Command{By: "ops"}
	tests := []struct {
		name  string
		state State
		cmd   string
		in    Command
		want  string // substring of the rejection; empty means accepted
	}{
		{"promote while holding", State{Phase: PhaseHolding}, CommandPromote, by, ""},
		{"promote at a gate", State{Phase: PhaseGate}, CommandPromote, by, ""},
		{"promote twice", State{Phase: PhaseHolding, PromoteRequested: true}, CommandPromote, by, "already pending"},
		{"promote while paused", State{Phase: PhaseHolding, Paused: true, PauseReason: "paused by x"}, CommandPromote, by, "resume it first"},
		{"promote before ready", State{Phase: PhaseWaitingReady, Candidate: "c"}, CommandPromote, by, "not Ready yet"},
		{"promote after the end", State{Phase: PhaseSucceeded, Outcome: OutcomeSucceeded}, CommandPromote, by, "has finished"},
		{"promote during rollback", State{Phase: PhaseRollingBack, Reason: "deadline"}, CommandPromote, by, "rolling back (deadline)"},
		{"promote-full while waiting", State{Phase: PhaseWaitingReady}, CommandPromoteFull, by, ""},
		{"promote-full twice", State{Phase: PhaseHolding, PromoteFull: true}, CommandPromoteFull, by, "already promoting"},
		{"pause", State{Phase: PhaseHolding}, CommandPause, by, ""},
		{"pause twice", State{Phase: PhaseHolding, Paused: true}, CommandPause, by, "already paused"},
		{"resume when not paused", State{Phase: PhaseHolding}, CommandResume, by, "not paused"},
		{"resume", State{Phase: PhaseHolding, Paused: true}, CommandResume, by, ""},
		{"abort without reason", State{Phase: PhaseHolding}, CommandAbort, by, "give a reason"},
		{"abort", State{Phase: PhaseHolding}, CommandAbort, Command{By: "ops", Reason: "errors"}, ""},
		{"anonymous", State{Phase: PhaseHolding}, CommandPause, Command{}, "say who"},
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
