package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture is a workspace with symbolic links of every kind, beside an
// outside directory holding a secret.
type fixture struct {
	w       *Workspace
	dir     string // the workspace directory
	outside string // a directory next to it
}

const secret = "the outside secret"

func newFixture(t testing.TB) fixture {
	t.Helper()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret+"\n"), 0o644))

	w, err := Open(filepath.Join(base, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	dir := w.Dir()
	for name, content := range map[string]string{
		"a.txt":          "alpha\n",
		"sub/f.txt":      "one\ntwo\n",
		"sub/deep/g.txt": "deep\n",
	} {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	for link, target := range map[string]string{
		"etc":        "/etc",       // absolute, outside
		"outdir":     outside,      // a symlinked directory outside
		"outrel":     "../outside", // relative, outside
		"secretlink": filepath.Join(outside, "secret.txt"),
		"chain1":     "chain2",                       // a chain that ends outside
		"chain2":     "chain3",                       //
		"chain3":     "outdir",                       //
		"up":         "sub/../..",                    // climbs out through a real directory
		"dangleout":  "../nowhere/file",              // dangling, outside
		"dangleabs":  "/nonexistent-jetway-dir/file", // dangling, absolute, outside
		"in":         "sub",                          // relative, inside
		"inabs":      filepath.Join(dir, "sub"),      // absolute, inside
		"dangle":     "sub/new.txt",                  // dangling, inside
		"loop1":      "loop2",                        // a loop
		"loop2":      "loop1",                        //
		"sub/toroot": "..",                           // inside: the workspace itself
		"sub/out2":   "../../outside",                // from a subdirectory, outside
		"inchain":    "in/deep",                      // a link through a link, inside
	} {
		must(t, os.Symlink(target, filepath.Join(dir, link)))
	}
	return fixture{w: w, dir: dir, outside: outside}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSessionDir_joins_valid_ids_under_base(t *testing.T) {
	got, err := SessionDir("/var/jetway", "acme", "sess_01-A")
	if err != nil || got != filepath.Join("/var/jetway", "acme", "sess_01-A") {
		t.Fatalf("SessionDir = %q, %v", got, err)
	}
}

func TestSessionDir_refuses_ids_that_are_not_one_safe_element(t *testing.T) {
	for _, tt := range []struct{ tenant, session string }{
		{"", "s"}, {"t", ""}, {"..", "s"}, {"t", "a/b"}, {"t", "a.b"}, {"t e", "s"},
		{strings.Repeat("x", 65), "s"}, {"t", "ü"}, {"t", "*"},
	} {
		if _, err := SessionDir("/base", tt.tenant, tt.session); !errors.Is(err, ErrInvalidID) {
			t.Errorf("SessionDir(%q, %q) error = %v, want ErrInvalidID", tt.tenant, tt.session, err)
		}
	}
	if err := ValidID("session", strings.Repeat("x", 64)); err != nil {
		t.Errorf("64 characters refused: %v", err)
	}
}

func TestOpen_creates_the_directory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t1", "s1")
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("directory not created: %v", err)
	}
}

func TestResolve_refuses_every_way_out(t *testing.T) {
	fx := newFixture(t)
	for _, name := range []string{
		"..",
		"../x",
		"../ws/a.txt", // back in by name, but lexically out first
		"/etc/passwd",
		"a/../../x",
		"sub/../../x",
		"etc",
		"etc/passwd",
		"outdir",
		"outdir/secret.txt",
		"outrel/secret.txt",
		"secretlink",
		"chain1/secret.txt",
		"up",
		"up/outside/secret.txt",
		"dangleout",
		"dangleabs",
		"sub/out2/secret.txt",
		"in/out2",
		"sub/toroot/../x",
		"in/../../x",
		filepath.Join(fx.outside, "secret.txt"),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := fx.w.Resolve(name)
			if !errors.Is(err, ErrOutsideWorkspace) {
				t.Fatalf("Resolve(%q) = %q, %v; want ErrOutsideWorkspace", name, got, err)
			}
			var oe *OutsideError
			if !errors.As(err, &oe) || oe.Path != name {
				t.Fatalf("error %v does not name the path %q", err, name)
			}
		})
	}
}

func TestResolve_follows_paths_that_stay_inside(t *testing.T) {
	fx := newFixture(t)
	for name, want := range map[string]string{
		"a.txt":                          "a.txt",
		"./a.txt":                        "a.txt",
		"sub/../a.txt":                   "a.txt",
		".":                              ".",
		"sub/":                           "sub",
		filepath.Join(fx.dir, "a.txt"):   "a.txt",
		fx.dir:                           ".",
		"in/f.txt":                       "sub/f.txt",
		"inabs/f.txt":                    "sub/f.txt",
		"in/deep/g.txt":                  "sub/deep/g.txt",
		"inchain/g.txt":                  "sub/deep/g.txt",
		"in/deep/../f.txt":               "sub/f.txt",
		"inchain/..":                     "sub", // ".." after a link is the target's parent
		"sub/toroot/a.txt":               "a.txt",
		"new/dir/file.txt":               "new/dir/file.txt",
		"dangle":                         "sub/new.txt",
		"sub/toroot/sub/toroot/in/f.txt": "sub/f.txt",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := fx.w.Resolve(name)
			if err != nil || got != want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", name, got, err, want)
			}
		})
	}
}

func TestResolve_ends_symlink_loops_with_an_error(t *testing.T) {
	fx := newFixture(t)
	_, err := fx.w.Resolve("loop1/x")
	if err == nil || errors.Is(err, ErrOutsideWorkspace) || !strings.Contains(err.Error(), "symbolic links") {
		t.Fatalf("Resolve(loop1/x) error = %v, want a loop error", err)
	}
}

func TestResolve_reaches_the_workspace_through_a_symlinked_root(t *testing.T) {
	base := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(base, "real"), 0o755))
	must(t, os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "alias")))
	w, err := Open(filepath.Join(base, "alias"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if got, err := w.Resolve(filepath.Join(base, "alias", "x.txt")); err != nil || got != "x.txt" {
		t.Fatalf("Resolve through the alias = %q, %v", got, err)
	}
	if got, err := w.Resolve(filepath.Join(base, "real", "x.txt")); err != nil || got != "x.txt" {
		t.Fatalf("Resolve through the real path = %q, %v", got, err)
	}
}

func TestEveryOperation_refuses_paths_outside(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	ops := map[string]func(p string) error{
		"read": func(p string) error { _, err := fx.w.Read(ctx, ReadRequest{Path: p}); return err },
		"write": func(p string) error {
			_, err := fx.w.Write(ctx, WriteRequest{Path: p, Content: "pwned"})
			return err
		},
		"edit": func(p string) error {
			_, err := fx.w.Edit(ctx, EditRequest{Path: p, Old: "secret", New: "pwned"})
			return err
		},
		"glob": func(p string) error { _, err := fx.w.Glob(ctx, GlobRequest{Pattern: p + "/*"}); return err },
		"grep": func(p string) error { _, err := fx.w.Grep(ctx, GrepRequest{Pattern: "secret", Path: p}); return err },
	}
	for op, run := range ops {
		for _, p := range []string{"../outside/secret.txt", filepath.Join(fx.outside, "secret.txt"), "outdir/secret.txt", "chain1/secret.txt", "secretlink", "dangleout", "dangleabs", "up/outside"} {
			if err := run(p); !errors.Is(err, ErrOutsideWorkspace) {
				t.Errorf("%s %q: error = %v, want ErrOutsideWorkspace", op, p, err)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(fx.outside, "secret.txt")); err != nil || string(b) != secret+"\n" {
		t.Fatalf("the outside file changed: %q, %v", b, err)
	}
	entries, err := os.ReadDir(filepath.Dir(fx.outside))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "outside" && e.Name() != "ws" {
			t.Errorf("something was created outside: %s", e.Name())
		}
	}
	if _, err := os.Stat("/nonexistent-jetway-dir"); err == nil {
		t.Errorf("a write through a dangling absolute link created /nonexistent-jetway-dir")
	}
}
