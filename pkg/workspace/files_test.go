package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeFile(t *testing.T, w *Workspace, name, content string) {
	t.Helper()
	p := filepath.Join(w.Dir(), name)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(content), 0o644))
}

func readFile(t *testing.T, w *Workspace, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.Dir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func openTemp(t *testing.T, c Config) *Workspace {
	t.Helper()
	w, err := c.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestRead_returns_numbered_lines_and_the_total(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "f.txt", "one\ntwo\r\nthree\nfour")
	got, err := w.Read(context.Background(), ReadRequest{Path: "f.txt", Offset: 2, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := ReadResult{Path: "f.txt", Content: "     2\ttwo\n     3\tthree\n", StartLine: 2, EndLine: 3, TotalLines: 4}
	if got != want {
		t.Fatalf("Read = %+v\nwant %+v", got, want)
	}
	all, err := w.Read(context.Background(), ReadRequest{Path: "f.txt"})
	if err != nil || all.EndLine != 4 || !strings.HasSuffix(all.Content, "     4\tfour\n") {
		t.Fatalf("Read whole = %+v, %v", all, err)
	}
}

func TestRead_of_an_empty_file_has_no_lines(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "empty", "")
	got, err := w.Read(context.Background(), ReadRequest{Path: "empty"})
	if err != nil || got.TotalLines != 0 || got.Content != "" || got.StartLine != 0 {
		t.Fatalf("Read = %+v, %v", got, err)
	}
}

func TestRead_refuses_an_offset_past_the_end(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "f.txt", "a\nb\n")
	_, err := w.Read(context.Background(), ReadRequest{Path: "f.txt", Offset: 5})
	if err == nil || !strings.Contains(err.Error(), "offset 5 is past the end of the file (2 lines)") {
		t.Fatalf("error = %v", err)
	}
}

func TestRead_cuts_long_lines_and_caps_the_text(t *testing.T) {
	w := openTemp(t, Config{MaxLineBytes: 10, MaxReadBytes: 60})
	long := strings.Repeat("é", 100) // 2 bytes each: the cut must not split one
	var b strings.Builder
	b.WriteString(long + "\n")
	for i := range 20 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	writeFile(t, w, "f.txt", b.String())
	got, err := w.Read(context.Background(), ReadRequest{Path: "f.txt"})
	if err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(got.Content, "\n", 2)[0]
	if want := "     1\t" + strings.Repeat("é", 5) + lineCut; first != want {
		t.Errorf("first line = %q, want %q", first, want)
	}
	if !got.Truncated || got.TotalLines != 21 || got.EndLine >= 21 || len(got.Content) > 60 {
		t.Errorf("Read = %+v: want truncated under 60 bytes with 21 lines in all", got)
	}
}

func TestRead_cuts_a_line_longer_than_the_read_buffer(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "min.js", strings.Repeat("x", 200_000)+"\nnext\n")
	got, err := w.Read(context.Background(), ReadRequest{Path: "min.js"})
	if err != nil {
		t.Fatal(err)
	}
	want := "     1\t" + strings.Repeat("x", 2000) + lineCut + "\n     2\tnext\n"
	if got.Content != want || got.TotalLines != 2 {
		t.Fatalf("Read = %d lines, content %q…", got.TotalLines, got.Content[:min(40, len(got.Content))])
	}
}

func TestRead_refuses_binary_files_and_directories(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "bin", "ELF\x00\x01\x02")
	writeFile(t, w, "d/x", "")
	if _, err := w.Read(context.Background(), ReadRequest{Path: "bin"}); !errors.Is(err, ErrBinary) {
		t.Errorf("binary: error = %v, want ErrBinary", err)
	}
	if _, err := w.Read(context.Background(), ReadRequest{Path: "d"}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: error = %v", err)
	}
	if _, err := w.Read(context.Background(), ReadRequest{Path: "missing"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: error = %v, want fs.ErrNotExist", err)
	}
}

func TestWrite_creates_parents_and_replaces_atomically(t *testing.T) {
	w := openTemp(t, Config{})
	ctx := context.Background()
	got, err := w.Write(ctx, WriteRequest{Path: "a/b/c.txt", Content: "hello\n"})
	if err != nil {
		t.Fatal(err)
	}
	if got != (WriteResult{Path: "a/b/c.txt", Bytes: 6, Created: true}) {
		t.Fatalf("Write = %+v", got)
	}
	must(t, os.Chmod(filepath.Join(w.Dir(), "a/b/c.txt"), 0o600))
	got, err = w.Write(ctx, WriteRequest{Path: "a/b/c.txt", Content: "bye\n"})
	if err != nil || got.Created {
		t.Fatalf("second Write = %+v, %v", got, err)
	}
	if s := readFile(t, w, "a/b/c.txt"); s != "bye\n" {
		t.Fatalf("content = %q", s)
	}
	fi, err := os.Stat(filepath.Join(w.Dir(), "a/b/c.txt"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, %v; want the replaced file's 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(filepath.Join(w.Dir(), "a/b"))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestWrite_through_a_link_inside_writes_its_target(t *testing.T) {
	fx := newFixture(t)
	if _, err := fx.w.Write(context.Background(), WriteRequest{Path: "dangle", Content: "x"}); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, fx.w, "sub/new.txt"); s != "x" {
		t.Fatalf("target content = %q", s)
	}
	if fi, err := os.Lstat(filepath.Join(fx.dir, "dangle")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
}

func TestWrite_refuses_a_directory_and_an_oversized_file(t *testing.T) {
	w := openTemp(t, Config{MaxFileBytes: 4})
	writeFile(t, w, "d/x", "")
	if _, err := w.Write(context.Background(), WriteRequest{Path: "d", Content: "x"}); err == nil {
		t.Error("write over a directory succeeded")
	}
	if _, err := w.Write(context.Background(), WriteRequest{Path: "big", Content: "12345"}); err == nil || !strings.Contains(err.Error(), "more than the limit") {
		t.Errorf("oversized write: error = %v", err)
	}
}

func TestEdit_replaces_a_unique_match(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "main.go", "package main\n\nfunc main() {\n\tprintln(1)\n}\n")
	got, err := w.Edit(context.Background(), EditRequest{Path: "main.go", Old: "println(1)", New: "println(2)"})
	if err != nil || got.Replacements != 1 || got.Path != "main.go" {
		t.Fatalf("Edit = %+v, %v", got, err)
	}
	if s := readFile(t, w, "main.go"); !strings.Contains(s, "println(2)") || strings.Contains(s, "println(1)") {
		t.Fatalf("content = %q", s)
	}
}

func TestEdit_refuses_no_match_and_several_matches(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "f.txt", "x = 1\nx = 1\nx = 1\n")
	ctx := context.Background()
	if _, err := w.Edit(ctx, EditRequest{Path: "f.txt", Old: "y = 1", New: "y = 2"}); !errors.Is(err, ErrNoMatch) {
		t.Errorf("no match: error = %v, want ErrNoMatch", err)
	}
	_, err := w.Edit(ctx, EditRequest{Path: "f.txt", Old: "x = 1", New: "x = 2"})
	if !errors.Is(err, ErrMultipleMatches) || !strings.Contains(err.Error(), "3 times") {
		t.Errorf("several matches: error = %v, want ErrMultipleMatches naming 3", err)
	}
	if s := readFile(t, w, "f.txt"); s != "x = 1\nx = 1\nx = 1\n" {
		t.Fatalf("a refused edit changed the file: %q", s)
	}
	got, err := w.Edit(ctx, EditRequest{Path: "f.txt", Old: "x = 1", New: "x = 2", All: true})
	if err != nil || got.Replacements != 3 {
		t.Fatalf("Edit all = %+v, %v", got, err)
	}
	if s := readFile(t, w, "f.txt"); s != "x = 2\nx = 2\nx = 2\n" {
		t.Fatalf("content = %q", s)
	}
}

func TestEdit_refuses_empty_or_unchanged_text(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "f.txt", "abc")
	for _, req := range []EditRequest{{Path: "f.txt", Old: "", New: "x"}, {Path: "f.txt", Old: "abc", New: "abc"}} {
		if _, err := w.Edit(context.Background(), req); err == nil {
			t.Errorf("Edit(%+v) succeeded", req)
		}
	}
}

func TestEdit_keeps_the_file_mode(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "run.sh", "echo hi\n")
	must(t, os.Chmod(filepath.Join(w.Dir(), "run.sh"), 0o755))
	if _, err := w.Edit(context.Background(), EditRequest{Path: "run.sh", Old: "hi", New: "bye"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(w.Dir(), "run.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode = %v, %v; want 0755", fi.Mode(), err)
	}
}

func TestRequests_and_results_round_trip_as_json(t *testing.T) {
	var req EditRequest
	must(t, json.Unmarshal([]byte(`{"path":"a.go","old":"x","new":"y","all":true}`), &req))
	if req != (EditRequest{Path: "a.go", Old: "x", New: "y", All: true}) {
		t.Fatalf("EditRequest = %+v", req)
	}
	b, err := json.Marshal(ReadResult{Path: "f", Content: "     1\tx\n", StartLine: 1, EndLine: 1, TotalLines: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"path":"f","content":"     1\tx\n","start_line":1,"end_line":1,"total_lines":1}`; string(b) != want {
		t.Fatalf("ReadResult JSON = %s\nwant %s", b, want)
	}
}

func TestWrite_readers_see_the_old_or_the_new_content_never_a_mix(t *testing.T) {
	w := openTemp(t, Config{})
	ctx := context.Background()
	a, b := strings.Repeat("A", 256<<10), strings.Repeat("B", 256<<10)
	if _, err := w.Write(ctx, WriteRequest{Path: "f", Content: a}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := range 40 {
			content := a
			if i%2 == 0 {
				content = b
			}
			if _, err := w.Write(ctx, WriteRequest{Path: "f", Content: content}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		s := readFile(t, w, "f")
		if s != a && s != b {
			t.Fatalf("a reader saw a partial write: %d bytes, starting %q", len(s), s[:min(8, len(s))])
		}
	}
}

func TestIsEscape_recognises_the_refusal_of_os_Root(t *testing.T) {
	w := openTemp(t, Config{})
	// The resolver never hands os.Root a path that escapes; this holds the
	// mapping used when the tree changes between the check and the use.
	_, err := w.root.Open("../x")
	if !isEscape(err) {
		t.Fatalf("isEscape(%v) = false; the standard library's error text changed", err)
	}
	if mapped := rootErr("read", "../x", err); !errors.Is(mapped, ErrOutsideWorkspace) {
		t.Fatalf("rootErr = %v, want ErrOutsideWorkspace", mapped)
	}
}

func TestRead_Edit_and_Grep_refuse_a_fifo_without_blocking(t *testing.T) {
	w := openTemp(t, Config{})
	if err := syscall.Mkfifo(filepath.Join(w.Dir(), "pipe"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	ctx := context.Background()
	if _, err := w.Read(ctx, ReadRequest{Path: "pipe"}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Read error = %v", err)
	}
	if _, err := w.Edit(ctx, EditRequest{Path: "pipe", Old: "a", New: "b"}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Edit error = %v", err)
	}
	got, err := w.Grep(ctx, GrepRequest{Pattern: "x"})
	if err != nil || got.Skipped != 1 {
		t.Errorf("Grep = %+v, %v; want the fifo skipped", got, err)
	}
}
