package workflows

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

func TestValidate(t *testing.T) {
	by := api.Command{By: "ops"}
	tests := []struct {
		name  string
		state state
		cmd   string
		in    api.Command
		want  string // substring of the rejection; empty means accepted
	}{
		{"promote while holding", state{Phase: api.PhaseHolding}, api.CommandPromote, by, ""},
		{"promote at a gate", state{Phase: api.PhaseGate}, api.CommandPromote, by, ""},
		{"promote twice", state{Phase: api.PhaseHolding, PromoteRequested: true}, api.CommandPromote, by, "already pending"},
		{"promote while paused", state{Phase: api.PhaseHolding, Pause: &pause{Cause: pausedByCommand, Reason: "paused by x"}}, api.CommandPromote, by, "resume it first"},
		{"promote before ready", state{Phase: api.PhaseWaitingReady, Candidate: "c"}, api.CommandPromote, by, "not Ready yet"},
		{"promote after the end", state{Phase: api.PhaseSucceeded, Outcome: api.OutcomeSucceeded}, api.CommandPromote, by, "has finished"},
		{"promote during rollback", state{Phase: api.PhaseRollingBack, Reason: "deadline"}, api.CommandPromote, by, "rolling back (deadline)"},
		{"promote-full while waiting", state{Phase: api.PhaseWaitingReady}, api.CommandPromoteFull, by, ""},
		{"promote-full twice", state{Phase: api.PhaseHolding, PromoteFull: true}, api.CommandPromoteFull, by, "already promoting"},
		{"pause", state{Phase: api.PhaseHolding}, api.CommandPause, by, ""},
		{"pause twice", state{Phase: api.PhaseHolding, Pause: &pause{Cause: pausedByCommand}}, api.CommandPause, by, "already paused"},
		{"resume when not paused", state{Phase: api.PhaseHolding}, api.CommandResume, by, "not paused"},
		{"resume", state{Phase: api.PhaseHolding, Pause: &pause{Cause: pausedByCommand}}, api.CommandResume, by, ""},
		{"abort without reason", state{Phase: api.PhaseHolding}, api.CommandAbort, by, "give a reason"},
		{"abort", state{Phase: api.PhaseHolding}, api.CommandAbort, api.Command{By: "ops", Reason: "errors"}, ""},
		{"anonymous", state{Phase: api.PhaseHolding}, api.CommandPause, api.Command{}, "say who"},
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
