package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFile_tools_refuse_a_hard_link_to_a_file_outside(t *testing.T) {
	base := t.TempDir()
	w, err := Config{}.Open(filepath.Join(base, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	outside := filepath.Join(base, "outside.txt")
	must(t, os.WriteFile(outside, []byte("OUTSIDE-SECRET\n"), 0o644))
	// ln ../outside.txt hl.txt, made inside the workspace.
	must(t, os.Link(outside, filepath.Join(w.Dir(), "hl.txt")))
	writeFile(t, w, "ok.txt", "ordinary OUTSIDE-SECRET-lookalike\n")
	ctx := context.Background()

	_, err = w.Read(ctx, ReadRequest{Path: "hl.txt"})
	if err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("read of a hard link = %v, want a refusal naming hard links", err)
	}
	if _, err := w.Edit(ctx, EditRequest{Path: "hl.txt", Old: "OUTSIDE", New: "x"}); err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("edit of a hard link = %v, want a refusal naming hard links", err)
	}
	g, err := w.Grep(ctx, GrepRequest{Pattern: "OUTSIDE-SECRET"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range g.Matches {
		if strings.HasPrefix(m, "hl.txt") {
			t.Errorf("grep read the hard link: %q", m)
		}
	}
	if g.Total != 1 || g.Skipped != 1 {
		t.Errorf("grep = %+v, want the ordinary file's match and the link skipped", g)
	}

	// Ordinary files still work, and writing over the link's name replaces
	// the name, never the outside file.
	if r, err := w.Read(ctx, ReadRequest{Path: "ok.txt"}); err != nil || !strings.Contains(r.Content, "ordinary") {
		t.Errorf("read of an ordinary file = %+v, %v", r, err)
	}
	if _, err := w.Write(ctx, WriteRequest{Path: "hl.txt", Content: "replaced\n"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "OUTSIDE-SECRET\n" {
		t.Errorf("the outside file changed: %q", b)
	}
	if r, err := w.Read(ctx, ReadRequest{Path: "hl.txt"}); err != nil || !strings.Contains(r.Content, "replaced") {
		t.Errorf("read after the write = %+v, %v", r, err)
	}
}
