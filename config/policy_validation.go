package config

import "fmt"

// FieldError is a problem with one annotation: which key, what is wrong and
// how to fix it, and the value that was found. It prints as
// `sluice.dev/steps: weights must increase and end at 100, got "50,20"`.
type FieldError struct {
	Key     string
	Message string
	Value   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s, got %q", e.Key, e.Message, e.Value)
}

// maxSteps keeps a policy readable and its workflow history small.
const maxSteps = 20

func validateSteps(key, raw string, weights []int64) error {
	if len(weights) == 0 {
		return &FieldError{Key: key, Message: `must list traffic weights ending at 100, e.g. "10,50,100"`, Value: raw}
	}
	if len(weights) > maxSteps {
		return &FieldError{Key: key, Message: fmt.Sprintf("has %d steps, at most %d are allowed; merge some", len(weights), maxSteps), Value: raw}
	}
	for i, w := range weights {
		if w < 1 || w > 100 {
			return &FieldError{Key: key, Message: fmt.Sprintf("weight %d is out of range; each weight must be between 1 and 100", w), Value: raw}
		}
		if i > 0 && w <= weights[i-1] {
			return &FieldError{Key: key, Message: "weights must increase and end at 100", Value: raw}
		}
	}
	if weights[len(weights)-1] != 100 {
		return &FieldError{Key: key, Message: "weights must increase and end at 100", Value: raw}
	}
	return nil
}
