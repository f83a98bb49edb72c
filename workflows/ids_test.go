package workflows

import (
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// Clusters sharing a Temporal namespace get rollouts of their own for
// targets of the same name; one cluster alone keeps the IDs it always had.
func TestWorkflowIDsPerCluster(t *testing.T) {
	hello := knative.TargetRef{Namespace: "shop", Kind: knative.KindService, Name: "hello"}
	for _, tt := range []struct {
		target   knative.TargetRef
		id, attr string
	}{
		{hello, "rollout/shop/service/hello", "shop/service/hello"},
		{hello.In("eu-west"), "rollout/eu-west/shop/service/hello", "eu-west:shop/service/hello"},
		{hello.In("eu-west").In("us-east"), "rollout/eu-west/shop/service/hello", "eu-west:shop/service/hello"},
	} {
		if got := api.RolloutID(tt.target); got != tt.id {
			t.Errorf("api.RolloutID(%+v) = %s, want %s", tt.target, got, tt.id)
		}
		if got := api.TargetAttr(tt.target); got != tt.attr {
			t.Errorf("api.TargetAttr(%+v) = %s, want %s", tt.target, got, tt.attr)
		}
	}
}
