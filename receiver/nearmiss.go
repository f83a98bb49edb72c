package receiver

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// maxWarned bounds the objects remembered; past it the memory starts again,
// and each object is warned of once more at worst.
const maxWarned = 10000

// nearMisses remembers which objects' policy mistakes were logged, so a
// Service whose sluice annotations would do nothing is warned of once, not
// at every event ApiServerSource sends about its Revisions. A changed
// mistake is warned of again.
type nearMisses struct {
	mu   sync.Mutex
	seen map[knative.TargetRef]string
}

// warn logs, once per object and mistake, why a target that is not opted
// in carries sluice annotations that do nothing: a misspelt opt-in, policy
// keys without it, keys on the Revision template.
func (n *nearMisses) warn(ctx context.Context, log *slog.Logger, t knative.Target, kind string) {
	review := config.ReviewPolicy(config.Subject{Kind: kind, Annotations: t.Annotations, TemplateAnnotations: t.TemplateAnnotations}, config.Defaults{})
	if review.OptedIn || len(review.Findings) == 0 {
		return
	}
	var msgs []string
	for _, f := range review.Findings {
		msgs = append(msgs, f.String())
	}
	text := strings.Join(msgs, "; ")
	n.mu.Lock()
	if n.seen == nil || len(n.seen) >= maxWarned {
		n.seen = map[knative.TargetRef]string{}
	}
	known := n.seen[t.Ref] == text
	n.seen[t.Ref] = text
	n.mu.Unlock()
	if known {
		return
	}
	log.WarnContext(ctx, "sluice annotations that do nothing: the target is not opted in; `sluice lint` shows the same",
		"target", t.Ref.String(), "findings", text)
}
