package analysis

// Payload is the JSON body of every webhook call (see docs/analysis.md).
type Payload struct {
	// Name and Moment say which hook this is and when it was called.
	Name   string `json:"name"`
	Moment string `json:"moment"`
	// ID is the same for every attempt of one call, so a hook can
	// deduplicate retries.
	ID       string            `json:"id"`
	Rollout  RolloutInfo       `json:"rollout"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Preview, with sluice.dev/preview, is where the candidate answers
	// alone: its tag's URL, or the target's URL with the header.
	Preview *PreviewInfo `json:"preview,omitempty"`
}

// PreviewInfo is the candidate's preview tag, its URL and the header that
// reaches the tag through any of the target's URLs.
type PreviewInfo struct {
	Tag    string            `json:"tag"`
	URL    string            `json:"url,omitempty"`
	Header map[string]string `json:"header"`
}

// RolloutInfo describes the rollout a webhook is called for.
type RolloutInfo struct {
	WorkflowID string `json:"workflowId"`
	Namespace  string `json:"namespace"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Candidate  string `json:"candidate"`
	Stable     string `json:"stable,omitempty"`
	Phase      string `json:"phase"`
	Step       int    `json:"step"`
	StepCount  int    `json:"stepCount"`
	Weight     int64  `json:"weight"`
	Outcome    string `json:"outcome,omitempty"`
	Reason     string `json:"reason,omitempty"`
}
