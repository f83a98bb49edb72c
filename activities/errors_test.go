package activities

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluicehq/sluice/knative"
)

// A refused write is sorted by what was refused: the list sluice wrote
// (roll back), or something else about the object or the caller (pause).
func TestWriteErrorSortsRefusals(t *testing.T) {
	o := knative.ObjectRef{Namespace: "default", Kind: knative.KindService, Name: "hello"}
	gk := schema.GroupKind{Group: "serving.knative.dev", Kind: "Service"}
	gr := schema.GroupResource{Group: "serving.knative.dev", Resource: "services"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"Knative's webhook on the template", apierrors.NewBadRequest(`admission webhook "validation.webhook.serving.knative.dev" denied the request: validation failed: expected 0 <= 500 <= 400: spec.template.spec.timeoutSeconds`), ErrWriteRefused},
		{"Knative's webhook on the traffic", apierrors.NewBadRequest(`admission webhook "validation.webhook.serving.knative.dev" denied the request: validation failed: Traffic targets sum to 90, want 100: spec.traffic`), ErrInvalidTraffic},
		{"a schema error on a traffic field", apierrors.NewInvalid(gk, "hello", field.ErrorList{field.Invalid(field.NewPath("spec", "traffic").Index(0).Child("percent"), 101, "too much")}), ErrInvalidTraffic},
		{"an admission policy on the template", apierrors.NewInvalid(gk, "hello", field.ErrorList{field.Forbidden(field.NewPath("spec", "template"), "frozen")}), ErrWriteRefused},
		{"RBAC", apierrors.NewForbidden(gr, "hello", errors.New(`User "system:serviceaccount:sluice-system:sluice-worker" cannot patch resource "services"`)), ErrWriteRefused},
		{"gone", apierrors.NewNotFound(gr, "hello"), ErrTargetNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var appErr *temporal.ApplicationError
			if err := writeError(context.Background(), tt.err, o); !errors.As(err, &appErr) || appErr.Type() != tt.want || !appErr.NonRetryable() {
				t.Fatalf("writeError = %v, want a non-retryable %s", err, tt.want)
			}
		})
	}
	var appErr *temporal.ApplicationError
	if err := writeError(context.Background(), apierrors.NewInternalError(errors.New("failed calling webhook")), o); errors.As(err, &appErr) {
		t.Fatalf("a 500 must be retried, got %v", err)
	}
}
