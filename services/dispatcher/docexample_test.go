package dispatcher

import (
	"encoding/json"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestThe_documented_error_example_is_what_the_input_route_answers holds
// EVENTS.md's example problem to the dispatcher: a reader copies the
// example's shape into a client, so it must be exactly what comes back.
func TestThe_documented_error_example_is_what_the_input_route_answers(t *testing.T) {
	doc, err := os.ReadFile("../../docs/EVENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "## Validation errors")
	if !ok {
		t.Fatal(`docs/EVENTS.md: no "## Validation errors" section`)
	}
	_, block, ok := strings.Cut(after, "```json\n")
	if !ok {
		t.Fatal("docs/EVENTS.md: no json example under Validation errors")
	}
	block, _, _ = strings.Cut(block, "```")
	var want map[string]any
	if err := json.Unmarshal([]byte(block), &want); err != nil {
		t.Fatalf("docs/EVENTS.md's example is not JSON: %v\n%s", err, block)
	}
	instance, _ := want["instance"].(string)
	if !strings.HasSuffix(instance, "/input") {
		t.Fatalf("the example's instance %q is not an input route", instance)
	}

	f := newFixture(t)
	resp := f.do("POST", instance, tokUser, `{"text":"hello"}`)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("POST %s answers\n%s\nbut docs/EVENTS.md shows\n%s", instance, strings.TrimSpace(string(body)), strings.TrimSpace(block))
	}
}
