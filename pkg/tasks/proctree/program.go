package proctree

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
	"jetway/pkg/tasks/proctree/internal/seccomp"
)

// The helper's program. Every decision about a tree's confinement is made
// here, in Go, where it is tested: which paths the view binds and where,
// the Landlock rule set (built here and handed over as a descriptor), the
// seccomp filter (assembled here and handed over as bytes), which limits.
// The helper (confiner/confine.c) only carries the steps out, in order,
// and its last step execs the command.

// programMagic opens every program; the helper refuses anything else.
const programMagic = "jetway-confine 1"

// program is a helper program being written, and the descriptors its
// steps name (the Landlock rule set), which the helper receives as
// descriptors confspec.FD+1 onwards, in order.
type program struct {
	b     []byte
	files []*os.File
}

func (p *program) step(op string, args ...string) {
	p.b = append(append(p.b, op...), 0)
	for _, a := range args {
		p.b = append(append(p.b, a...), 0)
	}
}

// list writes a count and then the strings, as exec's arguments and
// environment are written.
func (p *program) list(v []string) {
	p.b = append(append(p.b, strconv.Itoa(len(v))...), 0)
	for _, s := range v {
		p.b = append(append(p.b, s...), 0)
	}
}

// close closes the descriptors the program passes (after the start).
func (p *program) close() {
	for _, f := range p.files {
		_ = f.Close() // a descriptor of ours, once dup'ed into the child
	}
	p.files = nil
}

// compile writes spec as the helper's program, in an order where each step
// still has what it needs: the cgroups are joined before anything else
// (their files are outside every view), the view is built while the helper
// still has the capabilities to mount, Landlock and seccomp need
// no_new_privs, capabilities go next, and RLIMIT_AS last, right before the
// exec.
func compile(spec confspec.Spec) (*program, error) {
	p := &program{}
	p.step(programMagic)
	for _, dir := range spec.Join {
		p.step("cgroup", dir+"/cgroup.procs")
	}
	if spec.Probe {
		c := spec.Confine
		if c == nil {
			c = &confspec.Confinement{}
		}
		if err := p.view(c); err != nil {
			return nil, fmt.Errorf("proctree: the file system view: %w", err)
		}
		p.step("say", "view")
		p.step("exit", "0")
		return p, nil
	}
	c := spec.Confine
	var parts confinementParts
	if c != nil {
		var err error
		if parts, err = partsOf(c); err != nil {
			return nil, err
		}
		// The rule set's descriptor, passed to the helper as its next one.
		p.files = append(p.files, os.NewFile(uintptr(parts.fd), "landlock-ruleset"))
		if parts.ns.ok() {
			// The kept view (heldview.go), entered: its descriptors
			// follow the rule set's.
			p.files = append(p.files, os.NewFile(uintptr(parts.ns.mnt), "view-mnt"))
			user := ""
			if parts.ns.user >= 0 {
				p.files = append(p.files, os.NewFile(uintptr(parts.ns.user), "view-user"))
				user = strconv.Itoa(confspec.FD + 3)
			}
			p.step("setns", user, strconv.Itoa(confspec.FD+2))
		} else {
			p.b = append(p.b, parts.view...)
		}
	}
	if spec.Dir != "" {
		// After the view, whose root replaced the one the directory was
		// resolved in.
		p.step("chdir", spec.Dir)
	}
	if spec.CPU > 0 {
		// The soft limit sends SIGXCPU; the hard one a second later
		// SIGKILL for a process that catches it.
		p.rlimit(unix.RLIMIT_CPU, spec.CPU, spec.CPU+1)
	}
	if spec.FSize > 0 {
		p.rlimit(unix.RLIMIT_FSIZE, spec.FSize, spec.FSize)
	}
	if c != nil {
		if err := p.confine(c, parts); err != nil {
			p.close()
			return nil, err
		}
	}
	if spec.AS > 0 {
		p.rlimit(unix.RLIMIT_AS, spec.AS, spec.AS)
	}
	p.step("exec", spec.Path)
	p.list(spec.Args)
	p.list(spec.Env)
	return p, nil
}

func (p *program) rlimit(resource int, soft, hard uint64) {
	p.step("rlimit", strconv.Itoa(resource), strconv.FormatUint(soft, 10), strconv.FormatUint(hard, 10))
}

// confine adds no_new_privs, the Landlock rule set, the seccomp filter and
// the capability drop. Where the worker runs as root the capabilities go
// too, since a root with capabilities has ways past a file system rule
// set (loading a module, rebooting, reconfiguring the network).
func (p *program) confine(c *confspec.Confinement, parts confinementParts) error {
	p.step("nnp")
	p.step("landlock", strconv.Itoa(confspec.FD+1), strconv.FormatUint(uint64(parts.flags), 10))
	filter, err := seccomp.Filter(c)
	if err != nil {
		return fmt.Errorf("proctree: %w", err)
	}
	if filter != nil {
		p.step("seccomp", hex.EncodeToString(filter))
	}
	p.step("caps")
	return nil
}

// landlockRuleset is c's Landlock rule set, made here and enforced by the
// helper: its file system rules, its TCP rules and, from ABI 6, the signal
// and abstract socket scopes. Rules hold inodes, not names, so a rule set
// made in the worker's mount namespace holds in the helper's view, whose
// paths are bind mounts of the same inodes. Every file system right of
// ABI 5 is handled; network rights by mode: none handles TCP bind and
// connect with no port allowed, outbound handles bind alone, all handles
// none. Best effort lowers it to what the kernel knows (the worker refuses
// confinement below ABI 3; below ABI 4 the TCP rules are the seccomp
// filter's alone).
func landlockRuleset(c *confspec.Confinement) (int, uint32, error) {
	var net landlock.AccessNetSet
	switch c.Network {
	case "", confspec.NetworkNone:
		net = landlock.AccessNetSet(ll.AccessNetBindTCP | ll.AccessNetConnectTCP)
	case confspec.NetworkOutbound:
		net = landlock.AccessNetSet(ll.AccessNetBindTCP)
	case confspec.NetworkAll:
	default:
		return -1, 0, fmt.Errorf("proctree: network mode %q is none of none, outbound, all", c.Network)
	}
	cfg := landlock.Config{
		HandledAccessFS:  landlock.V5.HandledAccessFS,
		HandledAccessNet: net,
		Scoped:           landlock.V6.Scoped,
	}.BestEffort()
	rules := []landlock.Rule{
		landlock.RODirs(c.ReadOnlyDirs...).IgnoreIfMissing(),
		landlock.ROFiles(c.ReadOnlyFiles...).IgnoreIfMissing(),
		landlock.RWFiles(c.Devices...).IgnoreIfMissing(),
		landlock.RWDirs(c.ReadWrite...).WithRefer(),
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return -1, 0, fmt.Errorf("proctree: landlock rule set: %w", err)
	}
	if fd < 0 {
		// Best effort fell back to restricting nothing: fail closed.
		return -1, 0, errors.New("proctree: landlock rule set: the kernel offers nothing to restrict")
	}
	return fd, flags, nil
}

// The view. Landlock does not govern connect(2) on pathname unix sockets,
// so a command could reach any listening socket whose path it can name
// (a root tmux server's, a container daemon's, another session's). The
// helper enters a mount namespace of its own (and a user namespace of its
// own where the worker is not root, in which its user is mapped to
// itself and holds the capabilities to mount); there its root is
// replaced by an empty tmpfs into which only the confinement's paths are
// bound, so every other path, and every socket on it, does not exist for
// the command. Landlock still decides what may be done with the paths
// that do exist. The helper makes the namespaces itself, after its exec,
// not the worker's clone: the copy of the mount table then costs the
// command's start, not the worker's answer to it.

// stageDirs are where the new root is mounted before pivot_root; the first
// that exists and holds none of the bound paths is used.
var stageDirs = []string{"/mnt", "/media", "/srv", "/opt", "/boot", "/tmp", "/var/tmp", "/run", "/home", "/root"}

// viewPaths are the host paths to bind: every path of c, with /etc bound
// whole (Landlock refuses its secrets; binding each of its hundred-odd
// entries would cost a mount each) and /proc whole (Landlock refuses all
// of it but a few files, yet readlink of /proc/self/exe, which Landlock
// does not govern, is how go and others find themselves; another
// process's /proc/<pid>/root and cwd links need ptrace access, which the
// Landlock scope refuses), and paths inside another left to that one's
// recursive bind.
func viewPaths(c *confspec.Confinement) []string {
	var all []string
	for _, list := range [][]string{c.ReadOnlyDirs, c.ReadOnlyFiles, c.Devices, c.ReadWrite} {
		for _, p := range list {
			for _, whole := range []string{"/etc", "/proc"} {
				if confspec.Within(p, whole) {
					p = whole
				}
			}
			all = append(all, filepath.Clean(p))
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	out := all[:0]
	for _, p := range all {
		if len(out) > 0 && confspec.Within(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// view adds the steps that make the helper's root an empty tmpfs holding
// c's paths: the mounts made private (nothing may propagate back to the
// host), a tmpfs on a stage directory, a mount point and a bind for each
// path (a symlink such as /bin -> usr/bin copied as a symlink, a missing
// path skipped), then pivot_root into it. The helper's namespace is a copy
// of this process's, so what is looked up here is what it will find.
func (p *program) view(c *confspec.Confinement) error {
	paths := viewPaths(c)
	stage := ""
	for _, d := range stageDirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		if !slices.ContainsFunc(paths, func(p string) bool { return confspec.Within(p, d) }) {
			stage = d
			break
		}
	}
	if stage == "" {
		return errors.New("no directory to build the view in")
	}
	uid, gid := "", ""
	if os.Geteuid() != 0 {
		uid, gid = strconv.Itoa(os.Geteuid()), strconv.Itoa(os.Getegid())
	}
	p.step("unshare", uid, gid)
	p.step("private")
	p.step("tmpfs", stage)
	made := map[string]bool{stage: true}
	for _, path := range paths {
		fi, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		target := filepath.Join(stage, path)
		p.mkdirAll(filepath.Dir(target), made)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			p.step("symlink", link, target)
			continue
		case fi.IsDir():
			p.mkdirAll(target, made)
		default:
			p.step("touch", target)
		}
		p.step("bind", path, target)
	}
	p.step("pivot", stage)
	return nil
}

// mkdirAll adds a mkdir step for dir and each of its parents not made yet.
func (p *program) mkdirAll(dir string, made map[string]bool) {
	if made[dir] {
		return
	}
	p.mkdirAll(filepath.Dir(dir), made)
	made[dir] = true
	p.step("mkdir", dir)
}
