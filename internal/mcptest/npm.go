package mcptest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The published reference servers the tests run, at pinned versions: a
// new release must not change what a test holds without a change here.
// (Picked with `npm view @modelcontextprotocol/server-everything version`.)
const (
	EverythingPackage = "@modelcontextprotocol/server-everything@2026.8.31"
	FilesystemPackage = "@modelcontextprotocol/server-filesystem@2026.8.31"
)

// EverythingTools are server-everything's tools at its pinned version for
// a client that offers no roots, sampling or elicitation: twelve it
// registers at start and simulate-research-query, which it registers
// right after initialize, announcing it with tools/list_changed.
var EverythingTools = []string{
	"echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
	"get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource",
	"simulate-research-query", "toggle-simulated-logging", "toggle-subscriber-updates",
	"trigger-long-running-operation",
}

// npmInstallTimeout bounds one install from the registry.
const npmInstallTimeout = 5 * time.Minute

var (
	npmOnce sync.Once
	npmDir  string
	npmErr  error
)

// NPM installs the pinned reference servers from the npm registry, once
// per machine (kept in the user's cache, keyed by the pinned versions),
// and returns the install directory: its node_modules/.bin holds
// mcp-server-everything and mcp-server-filesystem. A confined stdio
// server needs the directory among the worker's read-only paths.
//
// The test is skipped, saying why, only when npm is missing or the
// install fails (no registry); any other failure fails it.
func NPM(t testing.TB) string {
	t.Helper()
	npmOnce.Do(func() { npmDir, npmErr = installNPM() })
	switch {
	case npmErr != nil && os.Getenv(RequireNPM) != "":
		t.Fatalf("the published MCP reference servers cannot be installed from the npm registry (%s is set): %v", RequireNPM, npmErr)
	case npmErr != nil:
		t.Skipf("the published MCP reference servers cannot be installed from the npm registry here: %v", npmErr)
	}
	return npmDir
}

// RequireNPM, set in the environment, makes a failed install of the
// reference servers fail the tests rather than skip them: CI sets it, so
// a broken install there never reads as a pass.
const RequireNPM = "JETWAY_TEST_REQUIRE_NPM"

// ServeEverythingHTTP runs the installed server-everything over
// streamable HTTP on a free port of 127.0.0.1, as its README starts it
// (`mcp-server-everything streamableHttp`, PORT in the environment),
// until the test ends, and returns its endpoint.
func ServeEverythingHTTP(t testing.TB, dir string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(dir, "node_modules", ".bin", "mcp-server-everything"), "streamableHttp")
		cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start server-everything: %v", err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		words, ok := awaitLine(stderr, "listening on port", 30*time.Second)
		if ok {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
		}
		if attempt < 2 && strings.Contains(words, "already in use") {
			continue // another process took the port between the probe and the listen
		}
		t.Fatalf("server-everything over streamable HTTP did not start: %s", words)
	}
}

// freePort is a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }() // only held to learn a free port
	return l.Addr().(*net.TCPAddr).Port, nil
}

// awaitLine reads r until a line holds want (true), r ends or d passes;
// it returns what it read.
func awaitLine(r io.Reader, want string, d time.Duration) (string, bool) {
	type result struct {
		text string
		ok   bool
	}
	done := make(chan result, 1)
	go func() {
		var seen []string
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if strings.Contains(sc.Text(), want) {
				done <- result{strings.Join(seen, "\n"), true}
				return
			}
		}
		done <- result{strings.Join(seen, "\n"), false}
	}()
	select {
	case res := <-done:
		return res.text, res.ok
	case <-time.After(d):
		return fmt.Sprintf("no %q within %s", want, d), false
	}
}

// installNPM installs the packages into <cache>/jetway-mcptest/npm/<key>
// unless a whole install is there: it installs into a directory of its
// own and renames it into place, under a lock, so test binaries running at
// once neither install twice nor see half an install.
func installNPM() (string, error) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("npm is not installed (apt-get install nodejs npm): %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: %w", err)
	}
	base := filepath.Join(cache, "jetway-mcptest", "npm")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("npm cache: %w", err)
	}
	key := strings.NewReplacer("@modelcontextprotocol/", "", "@", "-").Replace(EverythingPackage + "+" + FilesystemPackage)
	dir := filepath.Join(base, key)
	unlock, err := lockFile(filepath.Join(base, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if installed(dir) {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(base, ".install-")
	if err != nil {
		return "", fmt.Errorf("npm install: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }() // a scratch directory in the cache: a leftover is harmless
	ctx, cancel := context.WithTimeout(context.Background(), npmInstallTimeout)
	defer cancel()
	// A package of its own, installed into without --prefix, which would
	// also move the global npmrc (a registry's CA, a proxy) into tmp.
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private":true}`+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("npm install: %w", err)
	}
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save",
		"--cache", filepath.Join(base, ".npm-cache"), EverythingPackage, FilesystemPackage)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install %s %s: %w\n%s", EverythingPackage, FilesystemPackage, err, lastLines(out, 10))
	}
	if !installed(tmp) {
		return "", fmt.Errorf("npm install left no node_modules/.bin/mcp-server-everything in %s", tmp)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("npm install: %w", err)
	}
	return dir, nil
}

func installed(dir string) bool {
	for _, bin := range []string{"mcp-server-everything", "mcp-server-filesystem"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", bin)); err != nil {
			return false
		}
	}
	return true
}

// lockFile holds an exclusive lock on path until the returned func.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("npm install lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close() // the lock error is the one to report
		return nil, fmt.Errorf("npm install lock: %w", err)
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); _ = f.Close() }, nil // closing releases the lock anyway
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
