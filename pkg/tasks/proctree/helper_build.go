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
// source, which it finds where this file was compiled from, with the C
// compiler ($CC, or cc) into the user's cache, keyed by a hash of the
// source and the compiler's path, so each change builds once and test
// binaries running at once share the result (each build replaces the file
// by a rename).

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
		return "", errors.New("cannot tell where the helper's source is")
	}
	src := filepath.Join(filepath.Dir(self), "confiner", "confine.c")
	code, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("this jetway binary was built without its confinement helper (make build embeds it), and the helper's source is not at %s to build it from: %w", src, err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	h := sha256.New()
	h.Write([]byte(cc))
	h.Write(code)
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
	out, err := exec.Command(cc, helperCFlags(tmp, src)...).CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("compile the helper (%s, a C compiler and the kernel headers: apt-get install gcc linux-libc-dev): %w\n%s", cc, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("build the helper: %w", err)
	}
	return path, nil
}

// helperCFlags are the compiler's arguments, as the Makefile has them.
func helperCFlags(out, src string) []string {
	return []string{"-O2", "-static", "-nostdlib", "-fno-stack-protector", "-s", "-Wall", "-Werror", "-o", out, src}
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
