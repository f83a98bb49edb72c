// Package integrations holds what sluice ships for other tools (Argo CD's
// health check of the Rollout resource) and the tests that run those tools'
// own code on Rollout objects captured from the end-to-end suite.
package integrations

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/sluicehq/sluice/mirror"
)

// captured are Rollout objects as kubectl printed them during the e2e
// suite's TestRolloutResource, one per state, and what Argo CD and Flux
// must make of each.
var captured = []struct {
	file, argo string
	flux       status.Status
}{
	{"progressing.json", "Progressing", status.InProgressStatus},
	{"suspended.json", "Suspended", status.InProgressStatus},
	{"healthy.json", "Healthy", status.CurrentStatus},
	{"degraded.json", "Degraded", status.FailedStatus},
}

func read(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "rollouts", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// load decodes a captured object as Argo CD's Lua bridge receives it
// (numbers as floats).
func load(t *testing.T, file string) map[string]any {
	t.Helper()
	b := read(t, file)
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// toLua converts decoded JSON into Lua values, as Argo CD hands an object
// to a health script.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	}
	return lua.LNil
}

// argoHealth runs the shipped health.lua on obj in a Lua state with the
// libraries Argo CD's sandbox opens.
func argoHealth(t *testing.T, obj map[string]any) (string, string) {
	t.Helper()
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoFile(filepath.Join("argocd", "resource_customizations", mirror.Group, mirror.Kind, "health.lua")); err != nil {
		t.Fatalf("health.lua: %v", err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua returned %s, not a table", L.Get(-1).Type())
	}
	return hs.RawGetString("status").String(), hs.RawGetString("message").String()
}

// TestArgoCDHealth: the health check shipped for Argo CD, run by the Lua
// engine Argo CD embeds, on a Rollout in each state.
func TestArgoCDHealth(t *testing.T) {
	for _, c := range captured {
		t.Run(c.file, func(t *testing.T) {
			got, msg := argoHealth(t, load(t, c.file))
			if got != c.argo {
				t.Errorf("Argo CD health %s (%q), want %s", got, msg, c.argo)
			}
			if msg == "" || msg == "nil" {
				t.Errorf("Argo CD health %s has no message", got)
			}
		})
	}
	// Before sluice wrote a status, and while a newer spec is unreported.
	if got, _ := argoHealth(t, map[string]any{"metadata": map[string]any{"name": "x"}}); got != "Progressing" {
		t.Errorf("no status: %s, want Progressing", got)
	}
	stale := load(t, "healthy.json")
	stale["metadata"].(map[string]any)["generation"] = float64(2)
	if got, _ := argoHealth(t, stale); got != "Progressing" {
		t.Errorf("observedGeneration behind: %s, want Progressing", got)
	}
}

// TestFluxStatus: kstatus, which Flux's health checks use, reads the same
// objects as in progress, current or failed from their conditions alone.
func TestFluxStatus(t *testing.T) {
	for _, c := range captured {
		t.Run(c.file, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(read(t, c.file)); err != nil {
				t.Fatal(err)
			}
			res, err := status.Compute(u)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != c.flux {
				t.Errorf("kstatus %s (%q), want %s", res.Status, res.Message, c.flux)
			}
		})
	}
}
