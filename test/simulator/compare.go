package simulator

import (
	"encoding/json"

	duckv1 "knative.dev/pkg/apis/duck/v1"
)

func equalJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// equalConditions compares type, status, reason and message: transition
// times are not worth a write.
func equalConditions(a, b duckv1.Conditions) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason || a[i].Message != b[i].Message {
			return false
		}
	}
	return true
}

// equalStatus compares two statuses as JSON, ignoring condition times.
func equalStatus(a, b any) bool {
	return equalJSON(withoutTimes(a), withoutTimes(b))
}

func withoutTimes(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	if conds, ok := m["conditions"].([]any); ok {
		for _, c := range conds {
			if cm, ok := c.(map[string]any); ok {
				delete(cm, "lastTransitionTime")
			}
		}
	}
	return m
}
