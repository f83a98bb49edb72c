package workflows

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/measure"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite testdata/schema from the current types (a deliberate change of carried state)")

// carried are the types whose JSON a running rollout holds: the state it
// carries across continue-as-new, the payloads of its messages, its
// activities' inputs and results (replayed from history) and the answers of
// its queries (which the CLI and the report read).
func carried() map[string]any {
	return map[string]any{
		"carry":                RunInput{},
		"status":               api.Status{},
		"wave-status":          api.WaveStatus{},
		"api-command":          api.Command{},
		"api-candidate-signal": api.CandidateSignal{},
		"api-object-hint":      api.ObjectHint{},
		"api-result":           api.Result{},
		"api-wave-member":      api.WaveMember{},
		"api-wave-verdict":     api.WaveVerdict{},
		"api-wave-result":      api.WaveResult{},
		"act-resolve-input":    activities.ResolveInput{},
		"act-resolved":         activities.Resolved{},
		"act-progress":         events.Progress{},
		"act-check-input":      measure.CheckInput{},
		"act-webhook-input":    measure.WebhookInput{},
		"act-measurement":      analysis.Measurement{},
		"act-verify-input":     activities.VerifyInput{},
		"act-apply-input":      activities.ApplyTrafficInput{},
		"act-apply-result":     activities.ApplyTrafficResult{},
		"act-live-traffic":     activities.LiveTraffic{},
		"act-await-traffic":    activities.AwaitTrafficInput{},
		"act-traffic-change":   activities.TrafficChange{},
		"act-revision-ref":     knative.RevisionRef{},
		"act-revision-state":   knative.RevisionState{},
		"act-await-revision":   activities.AwaitRevisionInput{},
		"act-mark-input":       activities.MarkInput{},
		"act-record-input":     activities.RecordInput{},
		"act-scale-input":      activities.ScaleInput{},
		"act-await-pods-input": activities.AwaitPodsInput{},
		"act-await-reserve":    activities.AwaitReserveInput{},
		"act-join-wave-input":  activities.JoinWaveInput{},
		"act-join-wave-result": activities.JoinWaveResult{},
		"act-object-ref":       knative.ObjectRef{},
	}
}

// TestCarriedStateIsASchema holds the JSON of every carried type to a
// checked-in golden: each type, with every field set, is encoded through
// Temporal's data converter and compared with testdata/schema/NAME.json,
// and the golden is decoded into today's type and encoded again, which
// must give it back. A renamed or retyped field fails here, before a
// rollout that is running decodes it as zero. When a change is deliberate
// (and running rollouts are handled: docs/operations.md), rewrite the
// goldens with `go test ./workflows -run CarriedState -update-schema`.
func TestCarriedStateIsASchema(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	for name, zero := range carried() {
		t.Run(name, func(t *testing.T) {
			typ := reflect.TypeOf(zero)
			full := reflect.New(typ)
			fill(full.Elem(), name, &filler{})
			got := encode(t, dc, full.Interface())
			path := filepath.Join("testdata", "schema", name+".json")
			if *updateSchema {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v: a new carried type needs its golden: go test ./workflows -run CarriedState -update-schema", err)
			}
			if !bytes.Equal(got, golden) {
				t.Errorf("%s changed its JSON: a running rollout's history or carried state holds the old form.\n%s", typ, jsonDiff(golden, got))
			}
			// What the last release wrote decodes into today's type whole.
			p, err := dc.ToPayload(json.RawMessage(golden))
			if err != nil {
				t.Fatal(err)
			}
			back := reflect.New(typ)
			if err := dc.FromPayload(p, back.Interface()); err != nil {
				t.Fatalf("the golden %s no longer decodes into %s: %v", path, typ, err)
			}
			if again := encode(t, dc, back.Interface()); !bytes.Equal(again, golden) {
				t.Errorf("the golden %s does not survive a decode into %s: a field is lost or read differently.\n%s", path, typ, jsonDiff(golden, again))
			}
		})
	}
}

func encode(t *testing.T, dc converter.DataConverter, v any) []byte {
	t.Helper()
	p, err := dc.ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, p.Data, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// jsonDiff lists the lines of want and got that differ, for a message.
func jsonDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	in := func(lines []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range lines {
			m[strings.TrimSpace(l)] = true
		}
		return m
	}
	wm, gm := in(w), in(g)
	var b strings.Builder
	for _, l := range w {
		if !gm[strings.TrimSpace(l)] {
			fmt.Fprintf(&b, "- %s\n", strings.TrimSpace(l))
		}
	}
	for _, l := range g {
		if !wm[strings.TrimSpace(l)] {
			fmt.Fprintf(&b, "+ %s\n", strings.TrimSpace(l))
		}
	}
	return b.String()
}

// filler gives every field a value of its own, derived from its path so
// that adding a field changes no other field's value.
type filler struct{ n int }

func (f *filler) at(path string) {
	h := fnv.New32a()
	h.Write([]byte(path))
	f.n = int(h.Sum32()%97) + 1
}

var (
	timeType        = reflect.TypeFor[time.Time]()
	durationType    = reflect.TypeFor[time.Duration]()
	apiDurationType = reflect.TypeFor[api.Duration]()
	marshaler       = reflect.TypeFor[json.Marshaler]()
)

func fill(v reflect.Value, path string, f *filler) {
	f.at(path)
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(f.n) * time.Second)))
		return
	case v.Type() == durationType || v.Type() == apiDurationType:
		v.SetInt(int64(f.n) * int64(time.Second))
		return
	case v.Kind() != reflect.Pointer && reflect.PointerTo(v.Type()).Implements(marshaler) && v.Type().PkgPath() != "" && !strings.HasPrefix(v.Type().PkgPath(), "github.com/sluicehq/"):
		// A foreign type with its own encoding (a URL, a quantity) stays
		// zero: its fields are not its JSON.
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			if !sf.IsExported() || sf.Tag.Get("json") == "-" {
				continue
			}
			fill(v.Field(i), path+"."+sf.Name, f)
		}
	case reflect.Pointer:
		if strings.Count(path, ".") > 12 {
			return // a recursive type: stop
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), path, f)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), path+"[0]", f)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, path+".key", f)
		fill(e, path+".value", f)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString(path[strings.LastIndex(path, ".")+1:])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.n) + 0.5)
	case reflect.Interface:
		// Left nil: an interface's JSON has no fixed shape.
	}
}
