package tool

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestCapture_spills_the_whole_output_and_keeps_the_head(t *testing.T) {
	dir := t.TempDir()
	out := strings.Repeat("x", 50) + strings.Repeat("y", 50)
	got, err := Capture(dir, "toolu/01", 50, out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, strings.Repeat("x", 50)+"\n") || strings.Contains(got, "y") {
		t.Fatalf("head not kept alone: %q", got)
	}
	m := regexp.MustCompile(`the full output is in (\S+)\]`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no file reference in %q", got)
	}
	whole, err := os.ReadFile(m[1])
	if err != nil || string(whole) != out {
		t.Fatalf("spilled file = %q, %v", whole, err)
	}
}

func TestCapture_leaves_short_output_and_never_splits_a_character(t *testing.T) {
	if got, _ := Capture("", "a", 10, "short"); got != "short" {
		t.Errorf("short output changed: %q", got)
	}
	got, _ := Capture("", "a", 4, "aaaé and more")
	if !strings.HasPrefix(got, "aaa\n") {
		t.Errorf("cut inside a character: %q", got)
	}
}

func TestRegistry_refuses_bad_names_duplicates_and_non_object_schemas(t *testing.T) {
	f := func(name, schema string) Tool { return Func{Name: name, Schema: json.RawMessage(schema)} }
	if _, err := NewRegistry(f("has space", `{"type":"object"}`)); err == nil {
		t.Error("bad name accepted")
	}
	if _, err := NewRegistry(f("a", `{"type":"object"}`), f("a", `{"type":"object"}`)); err == nil {
		t.Error("duplicate accepted")
	}
	if _, err := NewRegistry(f("a", `{"type":"string"}`)); err == nil {
		t.Error("non-object schema accepted")
	}
	r, err := NewRegistry(f("b", `{"type":"object"}`), f("a", `{"type":"object","properties":{"n":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	specs := r.Specs(func(n string) bool { return n == "b" })
	if len(specs) != 1 || specs[0].Name != "a" {
		t.Errorf("Specs = %+v", specs)
	}
	if err := r.Validate("a", json.RawMessage(`{"n":1.5}`)); err == nil {
		t.Error("1.5 accepted as integer")
	}
	if err := r.Validate("a", json.RawMessage(`[1]`)); err == nil {
		t.Error("array accepted as object")
	}
	if err := r.Validate("a", nil); err != nil {
		t.Errorf("empty input refused: %v", err)
	}
}

func TestTodoWrite_replaces_the_list(t *testing.T) {
	s := &TodoStore{}
	tw := TodoWrite(s)
	r, err := tw.Run(context.Background(), Call{Input: json.RawMessage(`{"todos":[{"content":"a","status":"in_progress"},{"content":"b","status":"pending"}]}`)})
	if err != nil || !strings.Contains(r.Content, "1. [in_progress] a") {
		t.Fatalf("todo_write = %+v, %v", r, err)
	}
	if got := s.List(); len(got) != 2 || got[1].Content != "b" {
		t.Fatalf("store = %+v", got)
	}
	if _, err := tw.Run(context.Background(), Call{Input: json.RawMessage(`{"todos":[{"content":"a","status":"done"}]}`)}); err == nil {
		t.Error("bad status accepted")
	}
}
