package workspace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// GlobRequest asks for the files whose paths match Pattern.
type GlobRequest struct {
	// Pattern is slash-separated, relative to the workspace (or absolute
	// inside it). Each segment is a path.Match pattern (* ? [a-z] \x); a
	// segment "**" matches any number of directories, none included:
	// "**/*.go", "cmd/**/main.go".
	Pattern string `json:"pattern"`
	// Limit caps the paths returned; 0 or more than Config.MaxGlobResults
	// means Config.MaxGlobResults.
	Limit int `json:"limit,omitempty"`
}

// GlobResult lists matching files.
type GlobResult struct {
	// Paths are relative to the workspace, slash-separated, in walk order:
	// sorted by directory, then name ("a/b.go" before "a.go").
	Paths []string `json:"paths"`
	// Total counts every match, also those past Limit.
	Total int `json:"total"`
	// Truncated says Paths is not all: Total is more than Limit, or the
	// walk stopped at Config.MaxWalk entries.
	Truncated bool `json:"truncated,omitempty"`
}

// Glob lists the files (not directories) whose paths match a pattern. The
// walk does not descend into .git directories (unless the pattern starts
// inside one) nor follow symbolic links to directories; a symbolic link
// whose name matches is listed like a file.
func (w *Workspace) Glob(ctx context.Context, req GlobRequest) (GlobResult, error) {
	limit := req.Limit
	if limit <= 0 || limit > w.cfg.MaxGlobResults {
		limit = w.cfg.MaxGlobResults
	}
	res := GlobResult{Paths: []string{}}
	truncated, err := w.walk(ctx, req.Pattern, func(rel string) error {
		res.Total++
		if len(res.Paths) < limit {
			res.Paths = append(res.Paths, rel)
		}
		return nil
	})
	if err != nil {
		return GlobResult{}, fmt.Errorf("workspace: glob %q: %w", req.Pattern, err)
	}
	res.Truncated = truncated || res.Total > len(res.Paths)
	return res, nil
}

// errWalkFull ends a walk that reached Config.MaxWalk entries.
var errWalkFull = errors.New("walk limit reached")

// walk calls fn with the workspace-relative slash path of every file that
// matches pattern, in walk order, and reports whether it stopped at
// Config.MaxWalk entries.
func (w *Workspace) walk(ctx context.Context, pattern string, fn func(rel string) error) (bool, error) {
	base, segs, err := w.splitPattern(pattern)
	if err != nil {
		return false, err
	}
	fsys := w.root.FS()
	fi, err := fs.Stat(fsys, base)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, walkErr(base, err)
	}
	m := matcher(segs)
	if !fi.IsDir() {
		if len(segs) == 0 {
			return false, fn(base)
		}
		return false, nil
	}
	visited := 0
	var visit func(dir string, states []int) error
	visit = func(dir string, states []int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return walkErr(dir, err)
		}
		for _, e := range entries {
			if visited++; visited > w.cfg.MaxWalk {
				return errWalkFull
			}
			next := m.step(states, e.Name())
			if len(next) == 0 {
				continue
			}
			rel := path.Join(dir, e.Name())
			if e.IsDir() {
				if e.Name() == ".git" || !m.alive(next) {
					continue
				}
				if err := visit(rel, next); err != nil {
					return err
				}
				continue
			}
			if m.accepts(next) {
				if err := fn(rel); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err = visit(base, m.start())
	if errors.Is(err, errWalkFull) {
		return true, nil
	}
	return false, err
}

// walkErr maps os.Root's escape refusal to an *OutsideError and names the
// directory of other errors.
func walkErr(dir string, err error) error {
	if isEscape(err) {
		return &OutsideError{Path: dir, Reason: "the directory tree changed under it"}
	}
	return fmt.Errorf("%s: %w", dir, err)
}

// splitPattern resolves the literal directories a pattern starts with (they
// may be symbolic links inside the workspace) and returns that base as a
// slash path for the walk, with the wildcard segments that follow.
func (w *Workspace) splitPattern(pattern string) (string, []string, error) {
	if pattern == "" {
		return "", nil, errors.New("empty pattern")
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return "", nil, errors.New("pattern holds a NUL byte")
	}
	rel, ok := w.relative(pattern)
	if !ok {
		return "", nil, &OutsideError{Path: pattern, Reason: "an absolute path elsewhere"}
	}
	var lit, segs []string
	for _, s := range strings.Split(filepath.ToSlash(rel), "/") {
		if s == "" || (s == "." && len(segs) == 0) {
			continue
		}
		if len(segs) == 0 && !hasMeta(s) {
			lit = append(lit, s)
			continue
		}
		if s == ".." || s == "." {
			return "", nil, fmt.Errorf("%q after a wildcard is not supported", s)
		}
		if s != "**" {
			if _, err := path.Match(s, ""); err != nil {
				return "", nil, fmt.Errorf("segment %q: %w", s, err)
			}
		}
		segs = append(segs, s)
	}
	base := "."
	if len(lit) > 0 {
		r, err := w.resolve(strings.Join(lit, "/"))
		if err != nil {
			var oe *OutsideError
			if errors.As(err, &oe) {
				oe.Path = pattern
			}
			return "", nil, err
		}
		base = filepath.ToSlash(r)
	}
	return base, compact(segs), nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// compact folds repeated "**" segments, which match the same paths as one.
func compact(segs []string) []string {
	out := segs[:0]
	for _, s := range segs {
		if s == "**" && len(out) > 0 && out[len(out)-1] == "**" {
			continue
		}
		out = append(out, s)
	}
	return out
}

// matcher runs a segment pattern as a small NFA over path components: a
// state is the index of the next segment to match, so "**" costs no
// backtracking.
type matcher []string

func (m matcher) start() []int { return m.closure([]int{0}) }

// closure adds the state after each "**", which may match no directory.
func (m matcher) closure(states []int) []int {
	for i := 0; i < len(states); i++ {
		s := states[i]
		if s < len(m) && m[s] == "**" {
			states = addState(states, s+1)
		}
	}
	return states
}

// step is the states after matching one more path component.
func (m matcher) step(states []int, name string) []int {
	var next []int
	for _, s := range states {
		if s == len(m) {
			continue
		}
		if m[s] == "**" {
			next = addState(next, s)
		} else if ok, _ := path.Match(m[s], name); ok {
			next = addState(next, s+1)
		}
	}
	return m.closure(next)
}

func (m matcher) accepts(states []int) bool {
	for _, s := range states {
		if s == len(m) {
			return true
		}
	}
	return false
}

// alive reports whether a directory in these states may hold a match.
func (m matcher) alive(states []int) bool {
	for _, s := range states {
		if s < len(m) {
			return true
		}
	}
	return false
}

func addState(states []int, s int) []int {
	for _, x := range states {
		if x == s {
			return states
		}
	}
	return append(states, s)
}

// GrepRequest asks for the lines that match a regular expression.
type GrepRequest struct {
	// Pattern is an RE2 regular expression (regexp syntax; (?i) for case
	// insensitive).
	Pattern string `json:"pattern"`
	// Path limits the search: a file, a directory (searched whole), or a
	// glob pattern as in GlobRequest. Empty searches the whole workspace.
	Path string `json:"path,omitempty"`
	// Limit caps the lines returned; 0 means 100, and it is at most
	// Config.MaxGrepResults.
	Limit int `json:"limit,omitempty"`
}

// GrepResult holds matching lines as "path:line: text".
type GrepResult struct {
	Matches []string `json:"matches"`
	// Total counts every matching line, also those past Limit.
	Total int `json:"total"`
	// Skipped counts files not searched: binary, or larger than
	// Config.MaxFileBytes.
	Skipped int `json:"skipped,omitempty"`
	// Truncated says Matches is not all: Total is more than Limit, or the
	// walk stopped at Config.MaxWalk entries.
	Truncated bool `json:"truncated,omitempty"`
}

// defaultGrepLimit is the lines a Grep returns when the request names none.
const defaultGrepLimit = 100

// grepMaxLine is the longest line Grep matches whole; a longer one is
// matched on its first grepMaxLine bytes.
const grepMaxLine = 1 << 20

// Grep searches files for lines matching an RE2 regular expression. It skips
// .git directories and binary files (a NUL byte in the first 8000 bytes) and
// files larger than Config.MaxFileBytes, and cuts shown lines to
// Config.MaxLineBytes.
func (w *Workspace) Grep(ctx context.Context, req GrepRequest) (GrepResult, error) {
	if req.Pattern == "" {
		return GrepResult{}, errors.New("workspace: grep: empty pattern")
	}
	re, err := regexp.Compile(req.Pattern)
	if err != nil {
		return GrepResult{}, fmt.Errorf("workspace: grep: %w", err)
	}
	limit := req.Limit
	if limit <= 0 {
		limit = defaultGrepLimit
	}
	limit = min(limit, w.cfg.MaxGrepResults)
	pattern, err := w.grepPattern(req.Path)
	if err != nil {
		return GrepResult{}, fmt.Errorf("workspace: grep %q: %w", req.Pattern, err)
	}
	res := GrepResult{Matches: []string{}}
	truncated, err := w.walk(ctx, pattern, func(rel string) error {
		return w.grepFile(ctx, re, rel, limit, &res)
	})
	if err != nil {
		return GrepResult{}, fmt.Errorf("workspace: grep %q in %q: %w", req.Pattern, req.Path, err)
	}
	res.Truncated = truncated || res.Total > len(res.Matches)
	return res, nil
}

// grepPattern turns Grep's Path into a glob pattern.
func (w *Workspace) grepPattern(p string) (string, error) {
	if p == "" {
		return "**", nil
	}
	if hasMeta(p) {
		return p, nil
	}
	rel, err := w.resolve(p)
	if err != nil {
		return "", err
	}
	fi, err := w.root.Stat(rel)
	if err != nil {
		return "", walkErr(p, err)
	}
	if fi.IsDir() {
		return path.Join(filepath.ToSlash(rel), "**"), nil
	}
	return filepath.ToSlash(rel), nil
}

func (w *Workspace) grepFile(ctx context.Context, re *regexp.Regexp, rel string, limit int, res *GrepResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// A symbolic link the walk listed is followed only inside.
	real, err := w.resolve(rel)
	if err != nil {
		res.Skipped++
		return nil
	}
	f, fi, err := w.openRegular("grep", rel, real)
	if err != nil {
		res.Skipped++ // a dangling link, a FIFO, or gone since the walk saw it
		return nil
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	if fi.Size() > w.cfg.MaxFileBytes {
		res.Skipped++
		return nil
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(8000); bytes.IndexByte(head, 0) >= 0 {
		res.Skipped++
		return nil
	}
	n := 0
	return eachLine(br, grepMaxLine, func(line []byte, _ bool) error {
		n++
		if !re.Match(line) {
			return nil
		}
		res.Total++
		if len(res.Matches) < limit {
			text := line
			cut := len(text) > w.cfg.MaxLineBytes
			if cut {
				text = trimToRune(text[:w.cfg.MaxLineBytes])
			}
			s := fmt.Sprintf("%s:%d: %s", rel, n, strings.ToValidUTF8(string(text), "\uFFFD"))
			if cut {
				s += lineCut
			}
			res.Matches = append(res.Matches, s)
		}
		return nil
	})
}
