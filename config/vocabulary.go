package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
)

// AnnotationRelease, on a Revision's template, names its release for wave
// plans when the images alone should not (docs/waves.md).
const AnnotationRelease = Prefix + "release"

// Place is where a sluice.dev/ annotation belongs.
type Place string

const (
	// OnTarget keys sit in the metadata of the Service (or, in Route mode,
	// the Configuration): the rollout policy.
	OnTarget Place = "target"
	// OnTemplate keys sit in spec.template.metadata.annotations, so each
	// Revision carries its own.
	OnTemplate Place = "template"
	// BySluice keys are written by sluice itself; a person never needs to.
	BySluice Place = "sluice"
)

// Key is one annotation of sluice's vocabulary.
type Key struct {
	Name  string
	Place Place
	// Target says whether the key may also appear in the target's metadata
	// (sluice writes AnnotationEnded on a Service in Service mode).
	Target bool
}

// Vocabulary is every sluice.dev/ annotation sluice reads or writes, each
// declared once. A sluice.dev/ key that is not here is a mistake: sluice
// would ignore it, so the policy refuses it.
func Vocabulary() []Key {
	target := func(name string) Key { return Key{Name: name, Place: OnTarget, Target: true} }
	return []Key{
		target(AnnotationRollout),
		target(AnnotationSteps),
		target(AnnotationHold),
		target(AnnotationStepHolds),
		target(AnnotationGates),
		target(AnnotationProgressDeadline),
		target(AnnotationVerifyTimeout),
		target(AnnotationDeadline),
		target(AnnotationRoute),
		target(AnnotationAnalysis),
		target(AnnotationCapacity),
		target(AnnotationCapacitySurge),
		target(AnnotationCapacityTimeout),
		target(AnnotationCapacityOnTimeout),
		target(AnnotationWaves),
		target(AnnotationRollbackWindow),
		target(AnnotationPreview),
		target(AnnotationPreviewHold),
		target(AnnotationAnalysisTemplate),
		target(AnnotationAnalysisArgs),
		{Name: AnnotationRelease, Place: OnTemplate},
		{Name: AnnotationEnded, Place: BySluice, Target: true},
		{Name: AnnotationStableHistory, Place: BySluice, Target: true},
		{Name: AnnotationTemplateScale, Place: BySluice},
	}
}

// WrittenBySluice reports whether key is one sluice writes itself, which a
// policy never needs and a check of one must pass over.
func WrittenBySluice(key string) bool {
	k, ok := lookup(key)
	return ok && k.Place == BySluice
}

// lookup finds a key of the vocabulary by its full name.
func lookup(name string) (Key, bool) {
	i := slices.IndexFunc(Vocabulary(), func(k Key) bool { return k.Name == name })
	if i < 0 {
		return Key{}, false
	}
	return Vocabulary()[i], true
}

// Nearest is the key of the vocabulary closest to name, if one is close
// enough to be what its author meant: a typo, a plural, a dash for a dot.
func Nearest(name string) (string, bool) {
	short := strings.ToLower(strings.TrimPrefix(name, Prefix))
	best, bestDist := "", 0
	for _, k := range Vocabulary() {
		if k.Place == BySluice {
			continue // never what a person meant to write
		}
		cand := strings.TrimPrefix(k.Name, Prefix)
		d := levenshtein.ComputeDistance(short, cand)
		if best == "" || d < bestDist {
			best, bestDist = k.Name, d
		}
	}
	// A third of the name (at least 2 edits) is a typo; more is another word.
	if bestDist > max(2, len(short)/3) {
		return "", false
	}
	return best, true
}

// prefixLookalike reports whether key's domain is a near miss of sluice's
// ("sluice.io/steps", "sluice-dev/steps"), and the key it likely meant.
func prefixLookalike(key string) (string, bool) {
	domain, name, ok := strings.Cut(key, "/")
	if !ok || domain+"/" == Prefix {
		return "", false
	}
	domain = strings.ToLower(domain)
	near := levenshtein.ComputeDistance(domain, strings.TrimSuffix(Prefix, "/")) <= 2
	if !near && !strings.HasPrefix(domain, "sluice") { // sluice.io, sluice.com
		return "", false
	}
	if k, ok := lookup(Prefix + name); ok {
		return k.Name, true
	}
	if k, ok := Nearest(Prefix + name); ok {
		return k, true
	}
	return "", false
}

// unknownKeys checks every sluice.dev/ key of a target's metadata against
// the vocabulary, in a stable order.
func unknownKeys(annotations map[string]string) []error {
	var errs []error
	for _, key := range sortedKeys(annotations) {
		if strings.HasPrefix(key, NotificationPrefix) {
			if err := subscription(key, annotations[key]); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if !strings.HasPrefix(key, Prefix) {
			if meant, ok := prefixLookalike(key); ok {
				errs = append(errs, &FieldError{Key: key, Value: annotations[key],
					Message: fmt.Sprintf("is not a sluice annotation, and sluice ignores it; did you mean %s?", meant)})
			}
			continue
		}
		k, known := lookup(key)
		switch {
		case known && k.Target:
		case known && k.Place == OnTemplate:
			errs = append(errs, &FieldError{Key: key, Value: annotations[key],
				Message: "belongs in spec.template.metadata.annotations, where each Revision carries its own; here sluice ignores it"})
		case known:
			errs = append(errs, &FieldError{Key: key, Value: annotations[key],
				Message: "is written by sluice on Revisions, never by hand; remove it"})
		default:
			errs = append(errs, unknownKey(key, annotations[key], ""))
		}
	}
	return errs
}

// misplacedOnTemplate checks a target's Revision template annotations: only
// template keys belong there.
func misplacedOnTemplate(kind string, annotations map[string]string) []error {
	var errs []error
	for _, key := range sortedKeys(annotations) {
		if !strings.HasPrefix(key, Prefix) {
			continue
		}
		k, known := lookup(key)
		switch {
		case known && k.Place == OnTemplate:
		case known && k.Target && k.Place == OnTarget:
			errs = append(errs, &FieldError{Key: key, Value: annotations[key], Message: fmt.Sprintf(
				"is in spec.template.metadata.annotations, where sluice never reads it; move it to the %s's metadata.annotations", kindOr(kind))})
		case known:
			errs = append(errs, &FieldError{Key: key, Value: annotations[key],
				Message: "is written by sluice, never by hand; remove it from the template"})
		default:
			errs = append(errs, unknownKey(key, annotations[key], fmt.Sprintf(" (in the %s's metadata.annotations, not the template)", kindOr(kind))))
		}
	}
	return errs
}

// unknownKey is the error of a sluice.dev/ key sluice does not know, with
// the key it most likely meant (and where, after it).
func unknownKey(key, value, where string) error {
	msg := "is not a sluice annotation, and sluice would ignore it"
	if meant, ok := Nearest(key); ok {
		msg += fmt.Sprintf("; did you mean %s%s?", meant, where)
	} else {
		msg += "; see docs/policy.md for the annotations sluice reads"
	}
	return &FieldError{Key: key, Value: value, Message: msg}
}

func kindOr(kind string) string {
	if kind == "" {
		return "Service"
	}
	return kind
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
