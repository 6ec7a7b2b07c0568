package jobs_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"jetway/internal/testutil"
	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

// Attacks on what runs before and around a job's confinement, each with
// real processes through a real worker: loader variables in every place a
// tenant or operator can set a variable, and the network and unix sockets
// from a job and from a stdio MCP server under each network mode.

// loaderVars is glibc's list of variables a set-uid program's loader
// drops (elf/dl-unsecvars.h, unsecvars): each changes what the loader or
// libc loads, reads or writes before main.
var loaderVars = []string{
	"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LD_AUDIT", "LD_BIND_NOT",
	"LD_BIND_NOW", "LD_DEBUG", "LD_DEBUG_OUTPUT", "LD_DYNAMIC_WEAK", "LD_HWCAP_MASK",
	"LD_LIBRARY_PATH", "LD_ORIGIN_PATH", "LD_PRELOAD", "LD_PROFILE", "LD_SHOW_AUXV",
	"LD_USE_LOAD_BIAS", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE", "NIS_PATH", "NLSPATH",
	"RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR",
}

// evilLibrary compiles a shared library whose constructor (and, loaded by
// LD_AUDIT, whose la_version) appends a line to marker, and returns its
// path. It skips the test without gcc.
func evilLibrary(t *testing.T, dir, marker string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to compile the test's shared library")
	}
	src := filepath.Join(dir, "evil.c")
	code := fmt.Sprintf(`#include <fcntl.h>
#include <unistd.h>
static void mark(void) {
	int fd = open(%q, O_WRONLY|O_CREAT|O_APPEND, 0644);
	if (fd >= 0) { write(fd, "ran unconfined\n", 15); close(fd); }
}
__attribute__((constructor)) static void init(void) { mark(); }
unsigned int la_version(unsigned int v) { mark(); return v; }
`, marker)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "evil.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// loaderValue is what the variable is set to: the library, its
// directory, or the marker itself where the loader writes to a path.
func loaderValue(name, lib, marker string) string {
	switch name {
	case "LD_AUDIT", "LD_PRELOAD":
		return lib
	case "LD_DEBUG":
		return "all"
	case "LD_DEBUG_OUTPUT", "MALLOC_TRACE", "LD_PROFILE":
		return marker
	case "GLIBC_TUNABLES":
		return "glibc.malloc.check=3"
	case "RES_OPTIONS":
		return "debug"
	}
	return filepath.Dir(lib)
}

// markers lists what the library or the loader left beside marker.
func markers(t *testing.T, marker string) []string {
	t.Helper()
	m, err := filepath.Glob(marker + "*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoader_variables_in_a_profile_a_job_env_or_a_secret_run_nothing_unconfined(t *testing.T) {
	t.Parallel()
	// The library and the marker lie outside every workspace, where the
	// old shim (the jetway binary, dynamically linked, run as root before
	// Landlock) would have loaded and written them.
	outside := t.TempDir()
	marker := filepath.Join(outside, "marker")
	lib := evilLibrary(t, outside, marker)
	// Control: loaded by an unconfined program, the library runs.
	for _, name := range []string{"LD_PRELOAD", "LD_AUDIT"} {
		cmd := exec.Command("/bin/true")
		cmd.Env = []string{name + "=" + lib}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("control %s: %v\n%s", name, err, out)
		}
		if len(markers(t, marker)) == 0 {
			t.Fatalf("control: %s=%s left no marker in an unconfined /bin/true; the test's library does not work", name, lib)
		}
		for _, m := range markers(t, marker) {
			os.Remove(m)
		}
	}
	var jobEnv []string
	for _, name := range loaderVars {
		jobEnv = append(jobEnv, name+"="+loaderValue(name, lib, marker))
	}
	e := newSandboxEnv(t, func(c *jobs.Config) {
		c.Env = jobEnv // --job-env NAME passes the worker's value
		// The worker reads a secret named loader-<VAR> from the tenant's
		// variable JETWAY_MCP_SECRET_<TENANT>__LOADER_<VAR>.
		c.SecretEnv = func(variable string) (string, bool) {
			_, n, ok := strings.Cut(variable, "__LOADER_")
			if !ok {
				return "", false
			}
			return loaderValue(n, lib, marker), true
		}
	})
	// A job with every variable in its environment runs, confined.
	res := e.run("echo job-ran; echo $LD_AUDIT")
	if !strings.Contains(res.Output, "job-ran") || !strings.Contains(res.Output, lib) {
		t.Errorf("the job with loader variables: %q", res.Output)
	}
	// Each variable in a stdio server's env (the profile's) and in its
	// secrets: the server runs, confined.
	ws := filepath.Join(e.root, tenant, session)
	for i, name := range loaderVars {
		for _, place := range []string{"env", "secret"} {
			s := jobsapi.MCPServer{Name: fmt.Sprintf("l%d-%s", i, place), Command: "/bin/sh",
				Args: []string{"-c", "echo ran > ran-" + place + "-" + name}}
			if place == "env" {
				s.Env = map[string]string{name: loaderValue(name, lib, marker)}
			} else {
				s.Secrets = map[string]string{name: "loader-" + name}
			}
			if _, err := e.cli.MCPOpen(bg, jobsapi.MCPOpenRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Server: s}); err != nil {
				t.Fatalf("%s in a server's %s: %v", name, place, err)
			}
			testutil.EventuallyNil(t, 20*time.Second, "the server with "+name+" in its "+place, func() error {
				_, err := os.Stat(filepath.Join(ws, "ran-"+place+"-"+name))
				return err
			})
		}
	}
	if m := markers(t, marker); len(m) > 0 {
		b, _ := os.ReadFile(m[0])
		t.Errorf("code from a loader variable ran outside the confinement: %v (%q)", m, b)
	}
}

// netprobeArg makes the test binary a network probe (TestMain): each pair
// of arguments is an operation and its address; it prints one line per
// pair, "<op> ok" or "<op> refused: <error>".
const netprobeArg = "netprobe"

func netprobe(args []string) int {
	for i := 0; i+1 < len(args); i += 2 {
		op, addr := args[i], args[i+1]
		err := probeOnce(op, addr)
		if err != nil {
			fmt.Printf("%s refused: %v\n", op, err)
		} else {
			fmt.Printf("%s ok\n", op)
		}
	}
	return 0
}

func probeOnce(op, addr string) error {
	switch op {
	case "tcp", "nats":
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	case "udp":
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("udp-probe"))
		return err
	case "listen":
		l, err := net.Listen("tcp", addr)
		if err == nil {
			l.Close()
		}
		return err
	case "mptcp":
		// Landlock's TCP rules do not cover MPTCP: a listener must not
		// be had this way where they refuse one.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
		if err == nil {
			unix.Close(fd)
		}
		return err
	case "unix", "abstract":
		c, err := net.DialTimeout("unix", addr, 3*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	case "unixhere":
		// A socket in the workspace, listened on and reached by the job.
		l, err := net.Listen("unix", addr)
		if err != nil {
			return err
		}
		defer l.Close()
		c, err := net.DialTimeout("unix", addr, 3*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	return errors.New("unknown operation " + op)
}

// netTargets are what the probes aim at, all listening in the test.
type netTargets struct {
	tcp, nats, udp, unix, abstract string
	udpGot                         chan struct{}
}

func listenTargets(t *testing.T, natsURL string) *netTargets {
	t.Helper()
	nt := &netTargets{udpGot: make(chan struct{}, 16)}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	nt.tcp = tl.Addr().String()
	nt.nats = strings.TrimPrefix(natsURL, "nats://")
	ul, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := ul.ReadFrom(buf)
			if err != nil {
				return
			}
			if string(buf[:n]) == "udp-probe" {
				nt.udpGot <- struct{}{}
			}
		}
	}()
	nt.udp = ul.LocalAddr().String()
	// A unix socket in another directory: a short path (sun_path holds
	// 108 bytes), outside the workspace and the session's temporary one.
	other, err := os.MkdirTemp("", "jw-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	for _, addr := range []string{filepath.Join(other, "s.sock"), "@jetway-test-" + filepath.Base(other)} {
		ux, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ux.Close() })
		go func() {
			for {
				c, err := ux.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	nt.unix, nt.abstract = filepath.Join(other, "s.sock"), "@jetway-test-"+filepath.Base(other)
	return nt
}

// probeArgs are the netprobe arguments aimed at nt.
func (nt *netTargets) probeArgs() []string {
	return []string{"tcp", nt.tcp, "nats", nt.nats, "udp", nt.udp, "listen", "127.0.0.1:0", "mptcp", "-",
		"unix", nt.unix, "abstract", nt.abstract, "unixhere", "here.sock"}
}

// wantProbes checks each probe's line in out: ok for those in allowed,
// refused for the rest.
func wantProbes(t *testing.T, who, out string, allowed ...string) {
	t.Helper()
	for _, op := range []string{"tcp", "nats", "udp", "listen", "mptcp", "unix", "abstract", "unixhere"} {
		want := op + " refused"
		for _, a := range allowed {
			if a == op {
				want = op + " ok"
			}
		}
		if op == "abstract" && proctree.LandlockABI() < 6 {
			continue // scoped from Landlock ABI 6
		}
		if op == "listen" && !slices.Contains(allowed, "listen") && slices.Contains(allowed, "tcp") && proctree.LandlockABI() < 4 {
			continue // outbound: TCP bind is Landlock's to refuse, from ABI 4
		}
		if op == "mptcp" && slices.Contains(allowed, "listen") {
			continue // network all: whether MPTCP works is the kernel's business
		}
		if !strings.Contains(out, want) {
			t.Errorf("%s: want %q in:\n%s", who, want, out)
		}
	}
}

// udpArrived reports whether a probe datagram reached the listener.
func (nt *netTargets) udpArrived() bool {
	select {
	case <-nt.udpGot:
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

func TestNetwork_is_off_by_default_and_opened_per_profile_for_jobs_and_MCP_servers(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := newSandboxEnv(t, func(c *jobs.Config) { c.ReadOnly = []string{filepath.Dir(self)} })
	nt := listenTargets(t, e.url)
	probe := self + " " + netprobeArg + " " + strings.Join(nt.probeArgs(), " ")
	ws := filepath.Join(e.root, tenant, session)
	for _, mode := range []string{"", "outbound", "all"} {
		// A job.
		r := req("rm -f here.sock; " + probe)
		r.Network, r.TimeoutMS = mode, 60_000
		res, err := e.cli.Run(bg, r)
		if err != nil || !res.Ended {
			t.Fatalf("network %q: run = %+v, %v", mode, res, err)
		}
		who := fmt.Sprintf("a job with network %q", mode)
		// A stdio MCP server, its findings in a workspace file.
		result := "mcp-" + mode + ".txt"
		srv := jobsapi.MCPServer{Name: "probe-" + map[string]string{"": "none"}[mode] + mode, Command: "/bin/sh", Network: mode,
			Args: []string{"-c", "rm -f here.sock; " + probe + " > " + result + ".tmp; mv " + result + ".tmp " + result}}
		if _, err := e.cli.MCPOpen(bg, jobsapi.MCPOpenRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Server: srv}); err != nil {
			t.Fatalf("network %q: MCP open: %v", mode, err)
		}
		var mcpOut []byte
		testutil.EventuallyNil(t, 30*time.Second, "the MCP server's probes", func() error {
			mcpOut, err = os.ReadFile(filepath.Join(ws, result))
			return err
		})
		switch mode {
		case "":
			wantProbes(t, who, res.Output, "unixhere")
			wantProbes(t, "an MCP server with network none", string(mcpOut), "unixhere")
			if nt.udpArrived() {
				t.Errorf("a UDP datagram arrived from network none")
			}
		case "outbound":
			wantProbes(t, who, res.Output, "tcp", "nats", "udp", "unixhere")
			wantProbes(t, "an MCP server with network outbound", string(mcpOut), "tcp", "nats", "udp", "unixhere")
		case "all":
			wantProbes(t, who, res.Output, "tcp", "nats", "udp", "listen", "unixhere")
			wantProbes(t, "an MCP server with network all", string(mcpOut), "tcp", "nats", "udp", "listen", "unixhere")
		}
		if mode != "" {
			arrived := 0
			for range 2 { // the job's and the server's
				if nt.udpArrived() {
					arrived++
				}
			}
			if arrived != 2 {
				t.Errorf("network %q: %d of the job's and the server's 2 UDP datagrams arrived", mode, arrived)
			}
		}
	}
	// A network mode that is none of the three is refused.
	r := req("true")
	r.Network = "everything"
	_, err = e.cli.Run(bg, r)
	wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest)
}
