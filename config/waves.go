package config

import (
	"errors"
	"fmt"
	"time"
)

// AnnotationWaves holds a wave plan: the clusters a new Revision is rolled
// out in, wave by wave; see docs/waves.md. GitOps puts the same Service, and
// so the same plan, in every cluster.
const AnnotationWaves = Prefix + "waves"

// What a failure in a wave does to the waves before it.
const (
	// OnFailureStop leaves the earlier waves' clusters on the candidate and
	// stops the later ones (the default).
	OnFailureStop = "stop"
	// OnFailureRollback rolls every released cluster back as well.
	OnFailureRollback = "rollback"
)

// Waves is a validated wave plan.
type Waves struct {
	Waves     []Wave `json:"waves"`
	OnFailure string `json:"onFailure"`
}

// Wave is one set of clusters rolled out at once, and how long they soak at
// 100% before the next wave is released.
type Wave struct {
	Clusters []string      `json:"clusters"`
	Soak     time.Duration `json:"soak,omitempty"`
	// Gate: after the soak, the next wave waits for a person's promote.
	Gate bool `json:"gate,omitempty"`
}

// WaveOf is the index of the wave cluster is in, or -1.
func (w *Waves) WaveOf(cluster string) int {
	for i, wave := range w.Waves {
		for _, c := range wave.Clusters {
			if c == cluster {
				return i
			}
		}
	}
	return -1
}

// Clusters lists every cluster of the plan, wave by wave.
func (w *Waves) Clusters() []string {
	var out []string
	for _, wave := range w.Waves {
		out = append(out, wave.Clusters...)
	}
	return out
}

const maxSoak = 30 * 24 * time.Hour

type waveDoc struct {
	Clusters []string `json:"clusters"`
	Soak     string   `json:"soak"`
	Gate     bool     `json:"gate"`
}

type wavesDoc struct {
	Waves     []waveDoc `json:"waves"`
	OnFailure string    `json:"onFailure"`
}

// parseWaves reads the wave plan annotation.
func parseWaves(raw string) (*Waves, error) {
	key := AnnotationWaves
	var doc wavesDoc
	dec, ok := decodeDocument(raw, &doc, "a wave plan (docs/waves.md), a mapping")
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Message: fmt.Sprintf(format, args...), Value: shorten(raw)})
	}
	for _, p := range dec.problems {
		fail("%s", p)
	}
	if !ok || len(errs) > 0 {
		// A plan read in part would be judged on guesses.
		return nil, errors.Join(errs...)
	}
	w := &Waves{OnFailure: OnFailureStop}
	switch doc.OnFailure {
	case "", OnFailureStop:
	case OnFailureRollback:
		w.OnFailure = OnFailureRollback
	default:
		fail("onFailure %q must be %s (the earlier waves keep the candidate) or %s (they roll back too)", doc.OnFailure, OnFailureStop, OnFailureRollback)
	}
	if len(doc.Waves) < 2 {
		fail("lists %d waves; a plan needs at least two (one wave is every cluster at once: remove the annotation)", len(doc.Waves))
	}
	seen := map[string]int{}
	for i, d := range doc.Waves {
		wave := Wave{Clusters: d.Clusters, Gate: d.Gate}
		if d.Gate && i == len(doc.Waves)-1 {
			fail("wave %d: gate holds the next wave, and the last has none; put the gate on an earlier wave", i+1)
		}
		if len(d.Clusters) == 0 {
			fail("wave %d lists no clusters", i+1)
		}
		for _, c := range d.Clusters {
			if err := ValidateCluster(c); err != nil {
				fail("wave %d: %v", i+1, err)
			} else if j, dup := seen[c]; dup {
				fail("cluster %q is in wave %d and wave %d; a cluster belongs to one wave", c, j+1, i+1)
			}
			seen[c] = i
		}
		if d.Soak != "" {
			v, err := time.ParseDuration(d.Soak)
			if err != nil || v < 0 || v > maxSoak {
				fail("wave %d: soak %q must be a duration from 0 to %s, e.g. \"30m\"", i+1, d.Soak, maxSoak)
			}
			wave.Soak = v
		}
		w.Waves = append(w.Waves, wave)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return w, nil
}

// ValidateCluster checks a cluster name: a DNS label, as it becomes part of
// workflow IDs and task queue names.
func ValidateCluster(name string) error {
	if !nameRE.MatchString(name) || len(name) > 63 {
		return fmt.Errorf("cluster name %q must be lower-case letters, digits and dashes (a DNS label), e.g. \"eu-west-1\"", name)
	}
	return nil
}
