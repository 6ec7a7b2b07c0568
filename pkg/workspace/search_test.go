package workspace

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func globTree(t *testing.T, c Config) *Workspace {
	t.Helper()
	w := openTemp(t, c)
	for _, name := range []string{
		"main.go", "README.md", "cmd/jetway/main.go", "cmd/jetway/main_test.go",
		"pkg/a/a.go", "pkg/a/b/c/deep.go", "pkg/a/notes.txt", ".git/config", ".git/hooks/x.go",
		"vendor/.hidden.go",
	} {
		writeFile(t, w, name, "package x // "+name+"\n")
	}
	return w
}

func TestGlob_matches_double_star_at_any_depth(t *testing.T) {
	w := globTree(t, Config{})
	got, err := w.Glob(context.Background(), GlobRequest{Pattern: "**/*.go"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cmd/jetway/main.go", "cmd/jetway/main_test.go", "main.go", "pkg/a/a.go", "pkg/a/b/c/deep.go", "vendor/.hidden.go"}
	if !reflect.DeepEqual(got.Paths, want) || got.Total != len(want) || got.Truncated {
		t.Fatalf("Glob = %+v\nwant paths %q", got, want)
	}
}

func TestGlob_patterns(t *testing.T) {
	w := globTree(t, Config{})
	for pattern, want := range map[string][]string{
		"*.go":              {"main.go"},
		"pkg/**/*.go":       {"pkg/a/a.go", "pkg/a/b/c/deep.go"},
		"pkg/**/b/**":       {"pkg/a/b/c/deep.go"},
		"cmd/*/main?.go":    {},
		"cmd/*/main*.go":    {"cmd/jetway/main.go", "cmd/jetway/main_test.go"},
		"**/main.go":        {"cmd/jetway/main.go", "main.go"},
		"pkg/a/notes.txt":   {"pkg/a/notes.txt"},
		"pkg/a":             {},
		"missing/**":        {},
		".git/*":            {".git/config"},
		"[A-Z]*":            {"README.md"},
		"./pkg/**/**/*.txt": {"pkg/a/notes.txt"},
	} {
		t.Run(pattern, func(t *testing.T) {
			got, err := w.Glob(context.Background(), GlobRequest{Pattern: pattern})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Paths, want) {
				t.Fatalf("Glob(%q) = %q, want %q", pattern, got.Paths, want)
			}
		})
	}
}

func TestGlob_caps_results_and_reports_the_total(t *testing.T) {
	w := globTree(t, Config{MaxGlobResults: 2})
	got, err := w.Glob(context.Background(), GlobRequest{Pattern: "**/*.go"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Paths) != 2 || got.Total != 6 || !got.Truncated {
		t.Fatalf("Glob = %+v, want 2 of 6, truncated", got)
	}
}

func TestGlob_stops_a_walk_at_the_entry_limit(t *testing.T) {
	w := globTree(t, Config{MaxWalk: 3})
	got, err := w.Glob(context.Background(), GlobRequest{Pattern: "**"})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Truncated || got.Total > 3 {
		t.Fatalf("Glob = %+v, want a truncated walk", got)
	}
}

func TestGlob_refuses_bad_patterns(t *testing.T) {
	w := globTree(t, Config{})
	for _, p := range []string{"", "pkg/[", "*/../x"} {
		if _, err := w.Glob(context.Background(), GlobRequest{Pattern: p}); err == nil || errors.Is(err, ErrOutsideWorkspace) {
			t.Errorf("Glob(%q) error = %v, want a pattern error", p, err)
		}
	}
}

func TestGlob_does_not_walk_links_out(t *testing.T) {
	fx := newFixture(t)
	got, err := fx.w.Glob(context.Background(), GlobRequest{Pattern: "**/*.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.txt", "sub/deep/g.txt", "sub/f.txt"}; !slices.Equal(got.Paths, want) {
		t.Fatalf("Glob = %q, want %q", got.Paths, want)
	}
}

func TestGrep_returns_path_line_text_and_the_total(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "a.go", "package a\nfunc Foo() {}\nfunc bar() {}\n")
	writeFile(t, w, "sub/b.go", "package b\n// Foo is here\n")
	writeFile(t, w, "sub/c.txt", "Foo in text\n")
	writeFile(t, w, ".git/COMMIT_EDITMSG", "Foo\n")
	writeFile(t, w, "bin/tool", "\x00\x01Foo")
	got, err := w.Grep(context.Background(), GrepRequest{Pattern: `Foo`})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.go:2: func Foo() {}", "sub/b.go:2: // Foo is here", "sub/c.txt:1: Foo in text"}
	if !slices.Equal(got.Matches, want) || got.Total != 3 || got.Skipped != 1 || got.Truncated {
		t.Fatalf("Grep = %+v\nwant %q, 1 binary skipped", got, want)
	}
}

func TestGrep_limits_the_search_by_path(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "a.go", "x\n")
	writeFile(t, w, "sub/b.go", "x\n")
	writeFile(t, w, "sub/c.txt", "x\n")
	ctx := context.Background()
	for p, want := range map[string][]string{
		"sub":       {"sub/b.go:1: x", "sub/c.txt:1: x"},
		"sub/c.txt": {"sub/c.txt:1: x"},
		"**/*.go":   {"a.go:1: x", "sub/b.go:1: x"},
		"*.go":      {"a.go:1: x"},
	} {
		got, err := w.Grep(ctx, GrepRequest{Pattern: "x", Path: p})
		if err != nil || !slices.Equal(got.Matches, want) {
			t.Errorf("Grep in %q = %q, %v; want %q", p, got.Matches, err, want)
		}
	}
}

func TestGrep_caps_matches_and_counts_them_all(t *testing.T) {
	w := openTemp(t, Config{MaxLineBytes: 8})
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "match %d and a long tail\n", i)
	}
	writeFile(t, w, "f.txt", b.String())
	got, err := w.Grep(context.Background(), GrepRequest{Pattern: `^match`, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Matches) != 5 || got.Total != 50 || !got.Truncated {
		t.Fatalf("Grep = %d matches, total %d, truncated %v", len(got.Matches), got.Total, got.Truncated)
	}
	if want := "f.txt:1: match 0 " + lineCut; got.Matches[0] != want {
		t.Fatalf("first = %q, want %q", got.Matches[0], want)
	}
}

func TestGrep_refuses_a_bad_expression(t *testing.T) {
	w := openTemp(t, Config{})
	if _, err := w.Grep(context.Background(), GrepRequest{Pattern: `(unclosed`}); err == nil || !strings.Contains(err.Error(), "missing closing )") {
		t.Fatalf("error = %v", err)
	}
}

func TestGrep_never_reads_through_links_out(t *testing.T) {
	fx := newFixture(t)
	got, err := fx.w.Grep(context.Background(), GrepRequest{Pattern: "secret|alpha"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.txt:1: alpha"}; !slices.Equal(got.Matches, want) {
		t.Fatalf("Grep = %q, want %q", got.Matches, want)
	}
	if got.Skipped == 0 {
		t.Fatalf("the link to the outside secret was not counted as skipped: %+v", got)
	}
}

func TestGrep_and_Glob_stop_when_cancelled(t *testing.T) {
	w := globTree(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Glob(ctx, GlobRequest{Pattern: "**"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Glob error = %v, want context.Canceled", err)
	}
	if _, err := w.Grep(ctx, GrepRequest{Pattern: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Grep error = %v, want context.Canceled", err)
	}
}

func TestGlob_and_Grep_take_absolute_paths_inside(t *testing.T) {
	w := globTree(t, Config{})
	ctx := context.Background()
	got, err := w.Glob(ctx, GlobRequest{Pattern: w.Dir() + "/pkg/**/*.go"})
	if err != nil || !slices.Equal(got.Paths, []string{"pkg/a/a.go", "pkg/a/b/c/deep.go"}) {
		t.Fatalf("Glob = %q, %v", got.Paths, err)
	}
	g, err := w.Grep(ctx, GrepRequest{Pattern: "deep", Path: w.Dir() + "/pkg"})
	if err != nil || !slices.Equal(g.Matches, []string{"pkg/a/b/c/deep.go:1: package x // pkg/a/b/c/deep.go"}) {
		t.Fatalf("Grep = %q, %v", g.Matches, err)
	}
}
