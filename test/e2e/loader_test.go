package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/auth"
)

// The attack that once ran a tenant admin's library as root before any
// confinement, replayed against `jetway dev`: an agent profile whose stdio
// MCP server sets every loader variable to a library a job could have
// compiled into the workspace. The server starts through the static
// confinement helper, which reads none of them, so the library runs only
// in the confined server: it leaves its mark in the workspace, and its
// mark outside never appears.
func TestLoader_variables_in_a_profiles_MCP_server_run_only_confined_in_dev(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to compile the test's shared library")
	}
	d := startDev(t, devOptions{Script: echoScript})
	const session = "loader"
	ws := filepath.Join(d.Data, "jobs", auth.DefaultTenant, session)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "ran-unconfined")
	inside := filepath.Join(ws, "ran-confined")
	lib := markingLibrary(t, ws, outside, inside)

	// Control: an unconfined program that loads the library leaves both
	// marks, so their absence below means something.
	control := exec.Command("/bin/true")
	control.Env = []string{"LD_PRELOAD=" + lib}
	if out, err := control.CombinedOutput(); err != nil {
		t.Fatalf("control: %v\n%s", err, out)
	}
	for _, m := range []string{outside, inside} {
		if _, err := os.Stat(m); err != nil {
			t.Fatalf("control: the library left no mark at %s in an unconfined /bin/true", m)
		}
		os.Remove(m)
	}

	env := map[string]string{}
	for _, name := range []string{"LD_AUDIT", "LD_PRELOAD"} {
		env[name] = lib
	}
	for _, name := range []string{"GCONV_PATH", "LD_LIBRARY_PATH", "LOCPATH", "NLSPATH"} {
		env[name] = ws
	}
	profile, _ := json.Marshal(map[string]any{
		"instructions": "loader attack",
		"mcp":          []any{map[string]any{"name": "evil", "command": "/bin/sh", "args": []string{"-c", "sleep 30"}, "env": env}},
	})
	if resp, b := d.do(t, http.MethodPut, "/v1/agents/evil", adminToken(t, d), profile); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT the profile: %d %s", resp.StatusCode, b)
	}
	body, _ := json.Marshal(map[string]string{"text": "hello", "agent": "evil"})
	if resp, b := d.do(t, http.MethodPost, "/v1/sessions/"+session+"/input", d.User, body); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("input: %d %s", resp.StatusCode, b)
	}
	testutil.EventuallyNil(t, 60*time.Second, "the library to run in the confined MCP server", func() error {
		if _, err := os.Stat(inside); err != nil {
			return fmt.Errorf("no mark in the workspace yet: %w", err)
		}
		return nil
	})
	if _, err := os.Stat(outside); err == nil {
		t.Fatal("the library wrote outside the workspace: it ran unconfined")
	}
}

// markingLibrary compiles into dir a shared library whose constructor
// (and, loaded by LD_AUDIT, whose la_version) tries to create each of
// marks, and returns its path.
func markingLibrary(t *testing.T, dir string, marks ...string) string {
	t.Helper()
	calls := ""
	for _, m := range marks {
		calls += fmt.Sprintf("\tmark(%q);\n", m)
	}
	code := fmt.Sprintf(`#include <fcntl.h>
#include <unistd.h>
static void mark(const char *path) {
	int fd = open(path, O_WRONLY|O_CREAT|O_APPEND, 0644);
	if (fd >= 0) { write(fd, "x\n", 2); close(fd); }
}
static void all(void) {
%s}
__attribute__((constructor)) static void init(void) { all(); }
unsigned int la_version(unsigned int v) { all(); return v; }
`, calls)
	src := filepath.Join(t.TempDir(), "evil.c")
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "evil.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// adminToken is tenant default's admin token from dev's tokens.json.
func adminToken(t *testing.T, d *devStack) string {
	t.Helper()
	f, err := auth.ReadFile(filepath.Join(d.Data, auth.DevTokensFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Tokens {
		if g.Tenant == auth.DefaultTenant && g.IsAdmin() {
			return g.Token
		}
	}
	t.Fatal("tokens.json has no admin token for tenant default")
	return ""
}
