package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"jetway/pkg/tasks/proctree/confspec"
	"jetway/services/jobs/jobsapi"
)

// Packages of npx servers, installed once per tenant. A profile copied
// from a server's README says `command: npx, args: [-y, <package>, …]`;
// run as it is, npx downloads the package into every session's workspace
// (tens of megabytes each, seconds each start). The worker instead
// installs the package the first time a session of the tenant needs it,
// into a directory of the tenant's outside every workspace, with npm run
// confined exactly as a job is (plus outbound network, to reach the
// registry; install scripts are not run), and starts the package's
// program from there with the directory read-only to the server. The next
// session of the tenant starts it from the same directory, downloading
// nothing.

// npmInstallTimeout bounds one install.
const npmInstallTimeout = 5 * time.Minute

// npxPackage is what an npx command runs: the package spec as written
// (name, optionally @version) and the program of it to run, "" for the
// one npx would pick; ok is false for a command this does not handle
// (it then runs as npx itself, downloading per session).
func npxPackage(command string, args []string) (spec, bin string, rest []string, ok bool) {
	if filepath.Base(command) != "npx" {
		return "", "", nil, false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-y" || a == "--yes":
		case strings.HasPrefix(a, "--package="):
			spec = strings.TrimPrefix(a, "--package=")
		case (a == "-p" || a == "--package") && i+1 < len(args):
			spec = args[i+1]
			i++
		case strings.HasPrefix(a, "-"):
			return "", "", nil, false // an npx option this does not know
		case spec != "":
			return spec, a, args[i+1:], validPackage(spec)
		default:
			return a, "", args[i+1:], validPackage(a)
		}
	}
	return "", "", nil, false
}

// packageSpec is an npm package spec this installs: a registry name,
// optionally scoped, optionally @version (no URL, path or git spec).
var packageSpec = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*(@[A-Za-z0-9._^~<>=*+-]+)?$`)

func validPackage(spec string) bool { return packageSpec.MatchString(spec) && len(spec) <= 214 }

// packageName is spec without its version.
func packageName(spec string) string {
	if i := strings.LastIndex(spec, "@"); i > 0 {
		return spec[:i]
	}
	return spec
}

// mcpPackages installs and keeps the tenants' npx packages.
type mcpPackages struct {
	m  *mcpHost
	mu sync.Mutex
	// installs are the installs under way or done, by directory: one
	// install per tenant and spec, however many sessions ask at once.
	installs map[string]*packageInstall
}

type packageInstall struct {
	done chan struct{}
	err  error
}

// dir is where tenant's install of spec lives.
func (p *mcpPackages) dir(tenant, spec string) string {
	key := strings.NewReplacer("/", "+", "@", "=").Replace(spec)
	return filepath.Join(p.m.w.cfg.Root, ".mcp-packages", tenant, key)
}

// resolve turns an npx server into the installed program's command,
// installing the package first when the tenant has none; it returns the
// directory the server must be able to read. A server that is not an npx
// one comes back as it is.
func (p *mcpPackages) resolve(ctx context.Context, tenant string, spec jobsapi.MCPServer) (jobsapi.MCPServer, string, error) {
	pkg, bin, rest, ok := npxPackage(spec.Command, spec.Args)
	if !ok {
		return spec, "", nil
	}
	dir := p.dir(tenant, pkg)
	if err := p.install(ctx, dir, pkg); err != nil {
		return spec, "", err
	}
	program, err := packageBin(dir, packageName(pkg), bin)
	if err != nil {
		return spec, "", fmt.Errorf("npx %s: %w", pkg, err)
	}
	spec.Command, spec.Args = program, rest
	return spec, dir, nil
}

// install makes sure dir holds pkg, installing it when it does not; a
// caller whose ctx ends first leaves the install going for the next.
func (p *mcpPackages) install(ctx context.Context, dir, pkg string) error {
	p.mu.Lock()
	in := p.installs[dir]
	if in == nil || (isDone(in.done) && in.err != nil) {
		in = &packageInstall{done: make(chan struct{})}
		p.installs[dir] = in
		go func() {
			defer close(in.done)
			in.err = p.fill(dir, pkg)
		}()
	}
	p.mu.Unlock()
	select {
	case <-in.done:
		return in.err
	case <-ctx.Done():
		return fmt.Errorf("npx %s: still installing for the tenant (its first use): %w", pkg, ctx.Err())
	}
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// fill installs pkg into dir unless it is there: npm runs confined as a
// job whose workspace is a new directory beside dir, which becomes dir
// once the install is whole.
func (p *mcpPackages) fill(dir, pkg string) error {
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil {
		return nil
	}
	w := p.m.w
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("npx %s: %w", pkg, err)
	}
	removeStaleInstalls(filepath.Dir(dir))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".install-")
	if err != nil {
		return fmt.Errorf("npx %s: %w", pkg, err)
	}
	// A scratch install directory: removeStaleInstalls takes what a failed
	// removal leaves.
	defer func() { _ = os.RemoveAll(tmp) }()
	home := filepath.Join(tmp, ".home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return fmt.Errorf("npx %s: %w", pkg, err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("npx %s: npm is not installed on jobs worker %s: %w", pkg, w.cfg.WorkerID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), npmInstallTimeout)
	defer cancel()
	// The directory is a package of its own, so npm installs into it
	// without --prefix, which would also move the global npmrc (where an
	// operator sets the registry, its CA, a proxy) from npm's own prefix
	// into the directory.
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private":true}`+"\n"), 0o644); err != nil {
		return fmt.Errorf("npx %s: %w", pkg, err)
	}
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--no-save", "--ignore-scripts",
		"--cache", filepath.Join(home, "npm-cache"), pkg)
	cmd.Dir = tmp
	cmd.Env = append([]string{"PATH=" + workerPath(), "HOME=" + home, "TMPDIR=" + home, "LANG=C.UTF-8"}, passedEnv()...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	tree, err := p.m.host.StartConfined(cmd, w.cfg.Limits.Tree, w.jobConfinement(tmp, home, confspec.NetworkOutbound))
	if err != nil {
		return fmt.Errorf("npx %s: start npm install: %w", pkg, err)
	}
	defer tree.Close()
	waited := make(chan error, 1)
	go func() { waited <- tree.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = tree.KillNow() // waited for just below
		err = fmt.Errorf("did not finish within %s (killed: %v)", npmInstallTimeout, <-waited)
	}
	if err != nil {
		return fmt.Errorf("npx %s: npm install: %w: %s", pkg, err, lastWords(out.String()))
	}
	if err := os.RemoveAll(home); err != nil {
		return fmt.Errorf("npx %s: %w", pkg, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("npx %s: %w", pkg, err)
	}
	w.cfg.Log.Info().Str("package", pkg).Str("dir", dir).Msg("jobs: MCP package installed for the tenant")
	return nil
}

// removeStaleInstalls removes what installs of a worker that was killed
// during them left in the tenant's directory: one older than an install
// may take is no install under way.
func removeStaleInstalls(tenantDir string) {
	left, _ := filepath.Glob(filepath.Join(tenantDir, ".install-*"))
	for _, d := range left {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > 2*npmInstallTimeout {
			_ = os.RemoveAll(d)
		}
	}
}

// lastWords are the last lines of npm's output, for an error.
func lastWords(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// packageBin is the program of package name installed in dir that npx
// would run: bin when given, else the package's only program or the one
// named as the package.
func packageBin(dir, name, bin string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
	if err != nil {
		return "", fmt.Errorf("the installed package: %w", err)
	}
	var pj struct {
		Bin json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(raw, &pj); err != nil {
		return "", fmt.Errorf("the installed package.json: %w", err)
	}
	bins := map[string]string{}
	var one string
	if json.Unmarshal(pj.Bin, &one) == nil && one != "" {
		bins[filepath.Base(name)] = one
	} else if err := json.Unmarshal(pj.Bin, &bins); err != nil {
		return "", fmt.Errorf("package %s names no program (bin)", name)
	}
	pick := bin
	if pick == "" {
		switch _, own := bins[filepath.Base(name)]; {
		case own:
			pick = filepath.Base(name)
		case len(bins) == 1:
			for b := range bins {
				pick = b
			}
		default:
			return "", fmt.Errorf("package %s has %d programs; name one (npx --package=%s <program>)", name, len(bins), name)
		}
	}
	if _, ok := bins[pick]; !ok {
		return "", fmt.Errorf("package %s has no program %s", name, pick)
	}
	return filepath.Join(dir, "node_modules", ".bin", pick), nil
}
