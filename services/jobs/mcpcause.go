package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"jetway/pkg/tasks/proctree"
	"jetway/pkg/tasks/proctree/confspec"
	"jetway/services/jobs/jobsapi"
)

// Why an MCP server could not start, said so that a person can act on it.
// A confined server whose program or script jobs may not read fails deep
// in the confinement helper or the interpreter ("cannot exec", a module
// not found) with no word of the confinement; the worker knows what jobs
// may read, so it checks before starting and names the path and the flag.

// notPermitted says which file of the server — its program, the program a
// link names, or a file an argument names — jobs may not read and
// execute under c, and the flag that would let them; "" when all may be
// (or the worker does not confine, or cannot tell). path is the PATH a
// bare command name is looked up on.
func notPermitted(c *proctree.Confinement, spec jobsapi.MCPServer, path, dir string) string {
	if c == nil {
		return ""
	}
	files := []string{lookPath(spec.Command, path, dir)}
	for _, a := range spec.Args {
		if filepath.IsAbs(a) {
			files = append(files, a)
		}
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			continue // missing: the start says so itself
		}
		if fi, err := os.Stat(real); err != nil || fi.IsDir() || permitted(c, real) {
			continue
		}
		what := f
		if real != f {
			what = fmt.Sprintf("%s (a link to %s)", f, real)
		}
		flag := "--job-read " + installDir(real)
		return fmt.Sprintf("jobs may not read or execute %s: MCP servers run confined like jobs; "+
			"start the jobs worker with %s (jetway dev %s) to let them", what, flag, flag)
	}
	return ""
}

// lookPath is the file a command names: a path as it is (relative to the
// workspace dir), a bare name the first executable of that name on path.
func lookPath(command, path, dir string) string {
	if strings.Contains(command, "/") {
		if !filepath.IsAbs(command) {
			return filepath.Join(dir, command)
		}
		return command
	}
	for _, d := range filepath.SplitList(path) {
		f := filepath.Join(d, command)
		if fi, err := os.Stat(f); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return f
		}
	}
	return ""
}

// permitted reports whether a confined job may read and execute file.
func permitted(c *confspec.Confinement, file string) bool {
	for _, f := range c.ReadOnlyFiles {
		if resolved(f) == file {
			return true
		}
	}
	for _, d := range append(append([]string(nil), c.ReadOnlyDirs...), c.ReadWrite...) {
		if confspec.Within(file, resolved(d)) {
			return true
		}
	}
	return false
}

func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// installDir is the directory to open for file: for a package of an npm
// install, the directory holding its node_modules (the package needs the
// others beside it); otherwise the file's own directory.
func installDir(file string) string {
	if i := strings.Index(file, "/node_modules/"); i > 0 {
		return file[:i]
	}
	return filepath.Dir(file)
}

// confineExecFailed is how the confinement helper says it could not
// start the program (pkg/tasks/proctree/confiner).
const confineExecFailed = "jetway confine: cannot exec "

// failedStart says why a server whose process ended before it answered
// initialize could not start: it never ran as an MCP server, so it is
// failed rather than restarting. how is how the process ended with its
// last words.
func failedStart(how string, lines []string) string {
	for _, l := range lines {
		if strings.Contains(l, confineExecFailed) {
			return "could not be started (" + how + "): the program could not be executed; " +
				"jobs may read and execute only the system directories, the workspace and the --job-read paths of the jobs worker"
		}
	}
	return "exited before it answered initialize (" + how + ")"
}
