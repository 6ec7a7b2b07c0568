package redact

import (
	"bytes"
	"encoding/json"
)

// JSON redacts a JSON document a model or a person reads: a tool call's
// arguments. It reads the document as the log writer does (inJSON, so a
// quote after "name:" inside a string ends that string), and hides private
// keys whose armour is written with \n escapes. When that leaves the
// document invalid (a key cut short takes everything after it), it
// redacts string by string instead: each value with Text, and each string
// value of a member whose name is a secret's as a whole. raw is returned
// itself when nothing is secret.
func JSON(raw json.RawMessage) json.RawMessage {
	s := string(raw)
	out := privateKeys(secrets(s, true))
	if out == s {
		return raw
	}
	if json.Valid([]byte(out)) {
		return json.RawMessage(out)
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return json.RawMessage(`"` + Marker + `"`) // not JSON: nothing of it is safe to show
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(walk(v)); err != nil {
		return json.RawMessage(`"` + Marker + `"`)
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// walk redacts the strings of a decoded JSON value (see JSON).
func walk(v any) any {
	switch t := v.(type) {
	case string:
		return Text(t)
	case []any:
		for i := range t {
			t[i] = walk(t[i])
		}
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && secretName(k) && !keepValue(s) {
				t[k] = Marker
				continue
			}
			t[k] = walk(x)
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
