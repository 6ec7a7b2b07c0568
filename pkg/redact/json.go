package redact

import (
	"bytes"
	"encoding/json"
)

// JSON redacts a JSON document a model or a person reads: a tool call's
// arguments. It decodes the document and redacts each string with Text, as
// the text it stands for (a command's lines are lines there, where in the
// encoded document "\nrk_live_…" would glue a key to the escape before
// it), and hides whole each string value of a member whose name is a
// secret's ({"password": "…"}). raw is returned itself when nothing is
// secret; otherwise the document is encoded again, its members in sorted
// order. It always decodes: the fast path reads encoded text, where "\n"
// hides the start of a line, and a tool call's arguments are small.
func JSON(raw json.RawMessage) json.RawMessage {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		// Not JSON: read as text, which is what it is to its reader.
		return json.RawMessage(Text(string(raw)))
	}
	changed := false
	v = walk(v, &changed)
	if !changed {
		return raw
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return json.RawMessage(`"` + Marker + `"`)
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// walk redacts the strings of a decoded JSON value (see JSON) and sets
// *changed when it changes one.
func walk(v any, changed *bool) any {
	switch t := v.(type) {
	case string:
		r := Text(t)
		*changed = *changed || r != t
		return r
	case []any:
		for i := range t {
			t[i] = walk(t[i], changed)
		}
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && secretName(k) && !keepValue(s) {
				t[k] = Marker
				*changed = true
				continue
			}
			t[k] = walk(x, changed)
		}
	}
	return v
}

// Redactor is this package's redaction as a value, for code that takes its
// redaction as a dependency (the agent loop) rather than importing it.
type Redactor struct{}

// Text is the package's Text.
func (Redactor) Text(s string) string { return Text(s) }

// JSON is the package's JSON.
func (Redactor) JSON(raw json.RawMessage) json.RawMessage { return JSON(raw) }
