//go:build !jetway_confiner

package proctree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// A binary built without the jetway_confiner tag (go test, go run, a
// plain go build) has no helper inside: it compiles the helper from its
// sources, which it finds where this file was compiled from, into the
// user's cache, keyed by a hash of those sources, go.mod, go.sum and the
// Go version, so each change builds once and test binaries running at
// once share the result (each build replaces the file by a rename).

// helperFileMu guards helperFile, a prebuilt helper a test may name
// (useHelperFile) for a process that cannot build one (a test binary run
// as another user without a cache).
var (
	helperFileMu sync.Mutex
	helperFile   string
)

func helperBytes() ([]byte, error) {
	helperFileMu.Lock()
	pre := helperFile
	helperFileMu.Unlock()
	if pre != "" {
		return os.ReadFile(pre)
	}
	path, err := buildHelper()
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// buildHelper returns the path of the helper built from this checkout's
// sources, building it when the cache has none for them.
func buildHelper() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot tell where the helper's sources are")
	}
	here := filepath.Dir(self)
	root := here
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "", fmt.Errorf("this jetway binary was built without its confinement helper (make build embeds it), and the helper's sources are not at %s to build it from", here)
		}
		root = parent
	}
	h := sha256.New()
	h.Write([]byte(runtime.Version()))
	var files []string
	for _, dir := range []string{"confiner", "confspec"} {
		m, _ := filepath.Glob(filepath.Join(here, dir, "*.go"))
		files = append(files, m...)
	}
	files = append(files, filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("hash the helper's sources: %w", err)
		}
		h.Write([]byte(f))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("a cache directory to build the helper in: %w", err)
	}
	dir := filepath.Join(cache, "jetway-confine", hex.EncodeToString(h.Sum(nil))[:16])
	path := filepath.Join(dir, helperName)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build the helper: %w", err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "./"+mustRel(root, filepath.Join(here, "confiner")))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("go build the helper: %w\n%s", err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("build the helper: %w", err)
	}
	return path, nil
}

func mustRel(base, target string) string {
	r, err := filepath.Rel(base, target)
	if err != nil {
		return target
	}
	return r
}

// releaseHelperBytes has nothing to give back: the helper was read from a
// file into the heap, which the garbage collector frees.
func releaseHelperBytes() {}

// useHelperFile makes this process run the helper at path instead of
// building one; it must come before the first confined start.
func useHelperFile(path string) {
	helperFileMu.Lock()
	helperFile = path
	helperFileMu.Unlock()
}

// HelperFile is the path of the helper built from this checkout, built
// now if needed (for tests that hand it to another process).
func HelperFile() (string, error) { return buildHelper() }
