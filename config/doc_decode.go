package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/agnivade/levenshtein"
	"sigs.k8s.io/yaml"
)

// The YAML documents inside annotations (analysis, waves) are decoded one
// field at a time rather than by a single strict Unmarshal: that stops at
// the first mistake and names Go types ("cannot unmarshal string into Go
// struct field checkDoc.checks.dryRun of type bool"). Here every mistake is
// reported by its path in the document, in the document's own words, and a
// field that could not be read is remembered so later checks do not invent
// errors about its absence.

// docDecoder collects the problems of one document.
type docDecoder struct {
	problems []string
	// bad holds the paths of fields that could not be read.
	bad map[string]bool
}

// fieldsDecoder is a document type that decodes itself (a field with two
// forms, like compare: true or compare: {…}).
type fieldsDecoder interface {
	decodeFields(d *docDecoder, raw json.RawMessage, path string)
}

// decodeDocument reads a YAML document into the struct v points to.
// It returns false, with the one problem, when the text is not YAML or not
// a mapping at all.
func decodeDocument(raw string, v any, what string) (*docDecoder, bool) {
	d := &docDecoder{bad: map[string]bool{}}
	js, err := yaml.YAMLToJSON([]byte(raw))
	if err != nil {
		d.fail("is not valid YAML: %s", yamlMessage(err))
		return d, false
	}
	if kind := jsonKind(js); kind != "a mapping" {
		d.fail("must be %s of fields, not %s", what, kind)
		return d, false
	}
	d.object(js, "", v)
	return d, true
}

func (d *docDecoder) fail(format string, args ...any) {
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
}

// broken reports whether the field at path, or anything in it, could not
// be read.
func (d *docDecoder) broken(path string) bool {
	for p := range d.bad {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}

// object decodes a JSON object into the struct v points to, field by field.
func (d *docDecoder) object(raw json.RawMessage, path string, v any) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		d.bad[path] = true
		d.fail("%s must be a mapping of fields, not %s", where(path), jsonKind(raw))
		return
	}
	rv := reflect.ValueOf(v).Elem()
	byName := map[string]int{}
	var names []string
	for i := range rv.NumField() {
		tag, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
		if tag != "" && tag != "-" {
			byName[tag] = i
			names = append(names, tag)
		}
	}
	for _, name := range sortedKeys(rawKeys(fields)) {
		fpath := join(path, name)
		i, ok := byName[name]
		if !ok {
			d.bad[fpath] = true
			msg := fmt.Sprintf("unknown field %q", fpath)
			if near := nearestName(name, names); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", join(path, near))
			} else {
				msg += "; fields here are " + strings.Join(names, ", ")
			}
			d.fail("%s", msg)
			continue
		}
		d.value(fields[name], fpath, rv.Field(i).Addr())
	}
}

// value decodes one field into ptr (a pointer to the field).
func (d *docDecoder) value(raw json.RawMessage, path string, ptr reflect.Value) {
	if fd, ok := ptr.Interface().(fieldsDecoder); ok {
		fd.decodeFields(d, raw, path)
		return
	}
	t := ptr.Elem().Type()
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return
	}
	switch {
	case t.Kind() == reflect.Pointer && isDocStruct(t.Elem()):
		ptr.Elem().Set(reflect.New(t.Elem()))
		d.value(raw, path, ptr.Elem())
		return
	case isDocStruct(t):
		d.object(raw, path, ptr.Interface())
		return
	case t.Kind() == reflect.Slice && isDocStruct(t.Elem()):
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			d.bad[path] = true
			d.fail("%s must be a list, not %s", path, jsonKind(raw))
			return
		}
		s := reflect.MakeSlice(t, len(items), len(items))
		for i, item := range items {
			d.value(item, fmt.Sprintf("%s[%d]", path, i), s.Index(i).Addr())
		}
		ptr.Elem().Set(s)
		return
	}
	if t.Kind() == reflect.String && isNumberOrBool(raw) {
		// YAML writes 10 and "10" alike; the field's own check judges the text.
		ptr.Elem().SetString(string(bytes.TrimSpace(raw)))
		return
	}
	if err := json.Unmarshal(raw, ptr.Interface()); err != nil {
		d.bad[path] = true
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			d.fail("%s must be %s, not %s", path, wanted(t), jsonKind(raw))
		} else {
			d.fail("%s: %s", path, strings.TrimPrefix(err.Error(), "json: "))
		}
	}
}

// isDocStruct: a struct decoded field by field (not one that decodes itself).
func isDocStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]())
}

// wanted names what a Go type accepts, in YAML's terms.
func wanted(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "text"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(wanted(t.Elem()), "a "), "an ")
	case reflect.Map:
		return "a mapping of names to " + wanted(t.Elem())
	}
	return "a " + strings.ToLower(t.Kind().String())
}

// jsonKind names the kind of a JSON value, and quotes a short scalar.
func jsonKind(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "unreadable"
	}
	switch x := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the text %q", shorten(x))
	case bool:
		return fmt.Sprintf("the boolean %t", x)
	case float64:
		return "the number " + string(bytes.TrimSpace(raw))
	case nil:
		return "empty"
	}
	return "unreadable"
}

func isNumberOrBool(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v.(type) {
	case float64, bool:
		return true
	}
	return false
}

func nearestName(name string, names []string) string {
	best, bestDist := "", 0
	for _, n := range names {
		if len(n) >= 3 && strings.HasPrefix(strings.ToLower(name), strings.ToLower(n)) {
			return n // "maximum" for "max", "windows" for "window"
		}
		dist := levenshtein.ComputeDistance(strings.ToLower(name), strings.ToLower(n))
		if best == "" || dist < bestDist {
			best, bestDist = n, dist
		}
	}
	if best == "" || bestDist > max(2, len(name)/3) {
		return ""
	}
	return best
}

func rawKeys(m map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = ""
	}
	return out
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func where(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}

// yamlMessage is a YAML syntax error without the layers of converters it
// went through, which mean nothing to the document's author.
func yamlMessage(err error) string {
	msg := err.Error()
	for _, noise := range []string{"error converting YAML to JSON: ", "yaml: "} {
		msg = strings.ReplaceAll(msg, noise, "")
	}
	if strings.Contains(msg, "unsupported map key") {
		return "a key is not a name (keys are words like checks: or waves:, not lists, mappings or nothing)"
	}
	if strings.ContainsAny(msg, "{}%") || strings.Contains(msg, "interface") {
		// A converter's message about its own types: say where, not what.
		if line, _, ok := strings.Cut(msg, ":"); ok && strings.HasPrefix(line, "line ") {
			return line + ": the document cannot be read as YAML"
		}
		return "the document cannot be read as YAML"
	}
	return msg
}
