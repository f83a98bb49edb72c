package activities

import (
	"reflect"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// The worker registers every exported method of Activities under its own
// name; the contract lists those names. The two lists must be the same.
func TestActivityNamesAreTheContracts(t *testing.T) {
	var methods []string
	typ := reflect.TypeFor[*Activities]()
	for i := range typ.NumMethod() {
		methods = append(methods, typ.Method(i).Name)
	}
	want := slices.Sorted(slices.Values(api.Activities()))
	if !slices.Equal(methods, want) {
		t.Fatalf("Activities has methods %v; api.Activities() lists %v", methods, want)
	}
}
