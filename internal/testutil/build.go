package testutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// JetwayVersion is the version stamped into the jetway binary tests run,
// as `make build` stamps a release's.
const JetwayVersion = "v0.0.0-test"

// JetwayBinary returns a jetway binary built from this checkout, stamped
// JetwayVersion. Every test binary of a `go test ./...` shares one build:
// see Binary.
func JetwayBinary(t testing.TB) string {
	t.Helper()
	return Binary(t, jetwayPkg, jetwayLDFlags)
}

// JetwayBuild is JetwayBinary for a caller without a test at hand.
func JetwayBuild() (string, error) { return BinaryBuild(jetwayPkg, jetwayLDFlags) }

const (
	jetwayPkg     = "jetway/cmd/jetway"
	jetwayLDFlags = "-X main.version=" + JetwayVersion
)

// Binary returns the path of package pkg of this module built with
// ldflags, building it only when no test binary has built it from the
// same sources before. `go test ./...` runs a test binary per package,
// several at once, and a `go build` of jetway per package cost a link of
// a 130 MB binary each (and the first one the whole compile) on a 2-core
// machine. So the build goes into the user's cache under a key hashed
// from everything it is built from (the module's source files it links,
// go.mod, go.sum, the Go version and the flags): a binary is built once
// per change of the tree, a file lock makes test binaries that need it at
// the same moment wait for one build instead of each running its own,
// and builds unused for a while are removed.
func Binary(t testing.TB, pkg, ldflags string) string {
	t.Helper()
	bin, err := BinaryBuild(pkg, ldflags)
	if err != nil {
		t.Fatalf("build %s: %v", pkg, err)
	}
	return bin
}

// BinaryBuild is Binary for a caller without a test at hand.
func BinaryBuild(pkg, ldflags string) (string, error) {
	b := binaryBuild(pkg, ldflags)
	b.once.Do(func() { b.path, b.err = buildCached(pkg, ldflags) })
	if b.err != nil {
		return "", b.err
	}
	touch(b.path)
	return b.path, nil
}

// builds holds this process's builds, one per package and flags, so a
// test binary hashes the tree once however many tests ask.
var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

func binaryBuild(pkg, ldflags string) *build {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	k := pkg + "\x00" + ldflags
	if builds[k] == nil {
		builds[k] = &build{}
	}
	return builds[k]
}

// unusedFor is how long a cached build may go unused before a build of
// another state of the tree removes it. Far longer than any test run
// (12 minutes at most), so no test loses a binary it is about to start.
const unusedFor = 2 * time.Hour

// buildCached returns the cached build of pkg for the tree as it is now,
// building it under the entry's lock when there is none.
func buildCached(pkg, ldflags string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	key, err := sourceKey(root, pkg, ldflags)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("a cache directory for test builds: %w", err)
	}
	name := binaryName(pkg)
	base := filepath.Join(cache, "jetway-test-bin")
	// A directory of its own per build: a confined process given the
	// binary's directory among its read-only paths sees nothing else.
	dir := filepath.Join(base, name+"-"+key)
	bin := filepath.Join(dir, name)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("test build directory: %w", err)
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	// Under the lock: a prune removes a directory only while holding it.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("test build directory: %w", err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := goBuild(root, pkg, ldflags, bin); err != nil {
		return "", err
	}
	pruneUnused(base, name+"-"+key)
	return bin, nil
}

// binaryName is the name go build gives pkg's program: its last path
// element, or the one before a major version suffix (nats-server for
// github.com/nats-io/nats-server/v2).
func binaryName(pkg string) string {
	name := path.Base(pkg)
	if v, ok := strings.CutPrefix(name, "v"); ok && v != "" && strings.Trim(v, "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return name
}

// goBuild builds pkg to bin through a temporary name, so a binary that
// exists is a whole one even if this build is killed half way.
func goBuild(root, pkg, ldflags, bin string) error {
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, "-ldflags", ldflags, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp) // a partial output, if any; the build error is the one to report
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

// sourceKey hashes what a build of pkg is made of: the source and embedded
// files of every package of this module it links (as go list names them,
// build tags applied), go.mod and go.sum (which pin every other module),
// the Go version, platform and the flags. Test files are not among them,
// so editing a test does not rebuild the binary.
func sourceKey(root, pkg, ldflags string) (string, error) {
	// context: cgo and the build tags (GOFLAGS's -tags too), as go list
	// applies them, so a build with other settings is another build.
	const format = `{{if and .Module .Module.Main}}{{.Dir}}	cgo={{context.CgoEnabled}} tags={{join context.BuildTags ","}}{{range .GoFiles}}	{{.}}{{end}}{{range .CgoFiles}}	{{.}}{{end}}` +
		`{{range .CFiles}}	{{.}}{{end}}{{range .HFiles}}	{{.}}{{end}}{{range .SFiles}}	{{.}}{{end}}{{range .SysoFiles}}	{{.}}{{end}}` +
		`{{range .EmbedFiles}}	{{.}}{{end}}{{end}}`
	cmd := exec.Command("go", "list", "-deps", "-f", format, pkg)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -deps %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	h := sha256.New()
	h.Write(fmt.Appendf(nil, "%s %s/%s pkg=%s ldflags=%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, pkg, ldflags))
	files := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		h.Write([]byte(line + "\n")) // the package, its settings and its files' names
		dir, names, _ := strings.Cut(line, "\t")
		for _, n := range strings.Split(names, "\t")[1:] {
			files = append(files, filepath.Join(dir, n))
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && strings.HasSuffix(f, "go.sum")) {
			return "", fmt.Errorf("hash the sources of %s: %w", pkg, err)
		}
		h.Write(fmt.Appendf(nil, "%s %d\n", f, len(b)))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// moduleRoot is the directory of the go.mod above the test's working
// directory (the package's own directory under go test).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// lockFile takes an exclusive lock on path, waiting for another process
// that holds it, and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("test build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close() // the lock error is the one to report
		return nil, fmt.Errorf("test build lock %s: %w", path, err)
	}
	// Closing the file releases the lock; the lock file stays, empty.
	return func() { _ = f.Close() }, nil
}

// touch marks a build as used now, which keeps it from pruneUnused. A
// failure only makes the build look older than it is; the worst that
// comes of it is a rebuild.
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(filepath.Dir(path), now, now)
}

// pruneUnused removes the builds in base other than keep that nobody used
// for unusedFor (a build is 130 MB, and every change of the tree makes
// one). It runs after a build, and a build it cannot remove is left for
// the next one.
func pruneUnused(base, keep string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == keep {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < unusedFor {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if unlock, err := lockFile(dir + ".lock"); err == nil {
			_ = os.RemoveAll(dir)
			_ = os.Remove(dir + ".lock")
			unlock()
		}
	}
}
