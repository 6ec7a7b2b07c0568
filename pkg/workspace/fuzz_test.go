package workspace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolve holds Resolve's promise on the fixture's links: a path it
// accepts is local to the workspace, and none of its parts that exist on disk
// is a symbolic link, so the file it names is inside the workspace.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"a.txt", "../x", "/etc/passwd", "a/../../x", "etc/passwd", "outdir/secret.txt",
		"chain1/x", "up/outside", "dangleout", "in/deep/../f.txt", "inchain/..",
		"sub/toroot/sub/out2", "loop1", "./././a.txt", "sub//deep///g.txt", "",
	} {
		f.Add(s)
	}
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, name string) {
		rel, err := fx.w.Resolve(name)
		if err != nil {
			return
		}
		if rel != "." && !filepath.IsLocal(rel) {
			t.Fatalf("Resolve(%q) = %q: not local", name, rel)
		}
		p := fx.dir
		for _, part := range strings.Split(rel, "/") {
			p = filepath.Join(p, part)
			fi, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				t.Fatalf("Resolve(%q) = %q, which still goes through the link %s", name, rel, p)
			}
		}
		if real, err := filepath.EvalSymlinks(filepath.Join(fx.dir, rel)); err == nil {
			if real != fx.dir && !strings.HasPrefix(real, fx.dir+string(filepath.Separator)) {
				t.Fatalf("Resolve(%q) = %q, which is really %s", name, rel, real)
			}
		}
	})
}
