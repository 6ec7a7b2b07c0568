package main

// The tests in this file hold the manual to the binary: OPERATIONS.md's
// configuration tables must name every flag of every command with the
// environment variable behind it, and nothing that does not exist; every
// JETWAY_* name the docs mention must be something the code has; and every
// flag's usage must read cleanly in --help. Docs drift silently otherwise.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"jetway/internal/bench/benchcmd"
)

// repoRoot is the module's root, two levels above this package.
const repoRoot = "../.."

// provisionCommand names deploy/provision's binary in the doc's tables.
// It is not a cobra command, so its flags are read from its source.
const provisionCommand = "jetway-provision"

// benchCommand names cmd/jetway-bench in the docs' tables. It is a program
// of its own (the shipped binary links no bench); its flags come from its
// command, which only this test links.
const benchCommand = "jetway-bench"

// benchFlags are jetway-bench's flags.
func benchFlags() map[string]*pflag.Flag {
	parent := &cobra.Command{Use: "docs"}
	parent.AddCommand(benchcmd.New())
	return allFlags(parent)[benchCommand]
}

// allFlags walks every command under root and returns each flag it takes,
// its inherited persistent flags included, keyed by command then flag name.
func allFlags(root *cobra.Command) map[string]map[string]*pflag.Flag {
	out := map[string]map[string]*pflag.Flag{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c != root && !c.Hidden && c.Name() != "help" && c.Name() != "completion" {
			m := map[string]*pflag.Flag{}
			add := func(f *pflag.Flag) {
				if f.Name != "help" {
					m[f.Name] = f
				}
			}
			c.LocalFlags().VisitAll(add)
			c.InheritedFlags().VisitAll(add)
			out[c.Name()] = m
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

func TestNo_flag_usage_contains_a_backquote(t *testing.T) {
	// pflag takes a backquoted word in a usage string as the flag's value
	// name, so `jetway dev` in a usage printed "--tokens-file jetway dev".
	for cmd, flags := range allFlags(newRootCmd()) {
		for name, f := range flags {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("jetway %s --%s: usage contains a backquote, which --help prints as the value's name: %q", cmd, name, f.Usage)
			}
		}
	}
}

// docRow is one row of OPERATIONS.md's configuration tables.
type docRow struct {
	line     int
	flags    []string // without the dashes
	envs     []string
	defaults []string // the backquoted values of the Default cell
	usedBy   []string // command names after group expansion
}

var (
	backquoted = regexp.MustCompile("`([^`]*)`")
	flagWord   = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	envWord    = regexp.MustCompile(`\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b`)
)

// docGroups are the names the "Used by" column may use for several
// commands; the doc defines the same groups above its tables.
func docGroups(flags map[string]map[string]*pflag.Flag) map[string][]string {
	var all, clients []string
	for c, fs := range flags {
		all = append(all, c)
		if _, ok := fs["url"]; ok {
			clients = append(clients, c)
		}
	}
	sort.Strings(all)
	sort.Strings(clients)
	return map[string][]string{
		"all":      all,
		"services": {"dispatcher", "runner", "jobs-worker", "notifier"},
		"clients":  clients,
	}
}

// readConfigTables parses the rows of every table under OPERATIONS.md's
// "Configuration" heading whose header is Flag | Environment | Default |
// Used by | Meaning.
func readConfigTables(t *testing.T, groups map[string][]string) []docRow {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []docRow
	inSection, inTable := false, false
	for i, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = strings.HasPrefix(line, "## Configuration")
			inTable = false
			continue
		case !inSection:
			continue
		case strings.HasPrefix(line, "| Flag | Environment | Default | Used by | Meaning |"):
			inTable = true
			continue
		case !strings.HasPrefix(line, "|"):
			inTable = false
			continue
		case !inTable || strings.HasPrefix(line, "|---"):
			continue
		}
		cells := splitRow(line)
		if len(cells) != 5 {
			t.Fatalf("OPERATIONS.md:%d: want 5 cells, got %d: %s", i+1, len(cells), line)
		}
		r := docRow{line: i + 1}
		for _, m := range flagWord.FindAllStringSubmatch(cells[0], -1) {
			r.flags = append(r.flags, m[1])
		}
		// A provisioner flag is written with one dash, as Go's flag package prints it.
		for _, m := range regexp.MustCompile("`-([a-z][a-z0-9-]*)`").FindAllStringSubmatch(cells[0], -1) {
			r.flags = append(r.flags, m[1])
		}
		r.envs = envWord.FindAllString(cells[1], -1)
		for _, m := range backquoted.FindAllStringSubmatch(cells[2], -1) {
			r.defaults = append(r.defaults, m[1])
		}
		for _, c := range strings.Split(cells[3], ",") {
			c = strings.Trim(strings.TrimSpace(c), "`")
			if g, ok := groups[c]; ok {
				r.usedBy = append(r.usedBy, g...)
			} else if c != "" {
				r.usedBy = append(r.usedBy, c)
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("OPERATIONS.md: no configuration table found under \"## Configuration\"")
	}
	return rows
}

// splitRow splits a markdown table row into its trimmed cells, leaving
// pipes inside backquotes alone.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	inCode := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '`':
			inCode = !inCode
		case c == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
			continue
		case c == '|' && !inCode:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// provisionFlags reads deploy/provision's flags and their defaults' env
// variables from its source: flag.XxxVar(&v, "name", env("ENV", …), …).
func provisionFlags(t *testing.T) (names []string, envOf map[string]string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(repoRoot, "deploy", "provision", "main.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	envOf = map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 3 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !isIdent(sel.X, "flag") || !strings.HasSuffix(sel.Sel.Name, "Var") {
			return true
		}
		name, ok := stringLit(call.Args[1])
		if !ok {
			return true
		}
		names = append(names, name)
		if def, ok := call.Args[2].(*ast.CallExpr); ok && len(def.Args) > 0 {
			if env, ok := stringLit(def.Args[0]); ok {
				envOf[name] = env
			}
		}
		return true
	})
	if len(names) == 0 {
		t.Fatal("deploy/provision/main.go: found no flags")
	}
	return names, envOf
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// envReaders are the functions through which the code reads a variable
// of its environment: the standard ones and the small wrappers around them.
var envReaders = map[string]bool{"Getenv": true, "LookupEnv": true, "envOr": true, "envInt": true, "envInt64": true, "env": true, "getenv": true}

// envReads scans the module's Go files for the variables they read from
// the environment: a reader called with a string literal, or with a
// constant whose value is one. withTests includes _test.go files.
func envReads(t *testing.T, withTests bool) map[string]string {
	t.Helper()
	consts := map[string]string{}
	var files []*ast.File
	var paths []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != repoRoot && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || (!withTests && strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files, paths = append(files, f), append(paths, path)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i]); ok {
							consts[name.Name] = s
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reads := map[string]string{} // variable → a file that reads it
	for i, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			var fn string
			switch x := call.Fun.(type) {
			case *ast.Ident:
				fn = x.Name
			case *ast.SelectorExpr:
				fn = x.Sel.Name
			}
			if !envReaders[fn] {
				return true
			}
			var name string
			switch a := call.Args[0].(type) {
			case *ast.BasicLit:
				name, _ = stringLit(a)
			case *ast.Ident:
				name = consts[a.Name]
			case *ast.SelectorExpr:
				name = consts[a.Sel.Name]
			}
			if envWord.MatchString(name) && envWord.FindString(name) == name {
				reads[name] = paths[i]
			}
			return true
		})
	}
	return reads
}

// envBindings finds which flag's default each variable sets: it builds the
// commands with every variable the code reads set to its own number and
// looks for that number among the defaults.
func envBindings(t *testing.T, reads map[string]string) map[string]map[string]string {
	t.Helper()
	sentinel := map[string]string{}
	n := 424200
	for name := range reads {
		if _, internal := internalEnv[name]; internal {
			continue
		}
		n++
		v := strconv.Itoa(n)
		sentinel[v] = name
		t.Setenv(name, v)
	}
	bound := map[string]map[string]string{} // command → flag → variable
	for cmd, flags := range allFlags(newRootCmd()) {
		for name, f := range flags {
			if env, ok := sentinel[f.DefValue]; ok {
				if bound[cmd] == nil {
					bound[cmd] = map[string]string{}
				}
				bound[cmd][name] = env
			}
		}
	}
	return bound
}

// libraryEnv are variables the docs name that libraries read, not our code.
var libraryEnv = map[string]string{
	"SSL_CERT_FILE": "Go's crypto/x509 reads it for the system roots",
}

func TestOperations_configuration_tables_match_the_commands(t *testing.T) {
	reads := envReads(t, false)
	bound := envBindings(t, reads)
	for name := range reads {
		if _, internal := internalEnv[name]; !internal {
			t.Setenv(name, "") // the defaults as documented: nothing set
		}
	}
	flags := allFlags(newRootCmd())
	groups := docGroups(flags) // the provisioner is no member of "all"
	pnames, penv := provisionFlags(t)
	flags[provisionCommand] = map[string]*pflag.Flag{}
	for _, n := range pnames {
		flags[provisionCommand][n] = nil
		if env, ok := penv[n]; ok {
			if bound[provisionCommand] == nil {
				bound[provisionCommand] = map[string]string{}
			}
			bound[provisionCommand][n] = env
		}
	}
	flags[benchCommand] = benchFlags()
	rows := readConfigTables(t, groups)

	documented := map[string]map[string]docRow{} // command → flag → its row
	for _, r := range rows {
		if len(r.usedBy) == 0 {
			t.Errorf("OPERATIONS.md:%d: the row names no command in \"Used by\"", r.line)
		}
		for _, cmd := range r.usedBy {
			have, ok := flags[cmd]
			if !ok {
				t.Errorf("OPERATIONS.md:%d: no command %q", r.line, cmd)
				continue
			}
			for _, fl := range r.flags {
				if _, ok := have[fl]; !ok {
					t.Errorf("OPERATIONS.md:%d: jetway %s has no flag --%s", r.line, cmd, fl)
					continue
				}
				if documented[cmd] == nil {
					documented[cmd] = map[string]docRow{}
				}
				if prev, dup := documented[cmd][fl]; dup {
					t.Errorf("OPERATIONS.md:%d: %s --%s already documented at line %d", r.line, cmd, fl, prev.line)
				}
				documented[cmd][fl] = r
			}
		}
		for _, env := range r.envs {
			if _, ok := reads[env]; ok {
				continue
			}
			if _, ok := libraryEnv[env]; ok {
				continue
			}
			if slices.ContainsFunc(r.usedBy, func(c string) bool { return c == provisionCommand }) &&
				slices.Contains(mapValues(penv), env) {
				continue
			}
			t.Errorf("OPERATIONS.md:%d: nothing reads the variable %s", r.line, env)
		}
		// Defaults: when the cell gives one value per flag, each is the flag's.
		if len(r.defaults) == len(r.flags) {
			for i, fl := range r.flags {
				for _, cmd := range r.usedBy {
					f := flags[cmd][fl]
					if f == nil {
						continue
					}
					if !sameDefault(r.defaults[i], f.DefValue) {
						t.Errorf("OPERATIONS.md:%d: jetway %s --%s defaults to %q, the doc says %q", r.line, cmd, fl, f.DefValue, r.defaults[i])
					}
				}
			}
		}
	}
	for cmd, fs := range flags {
		for name := range fs {
			r, ok := documented[cmd][name]
			if !ok {
				t.Errorf("OPERATIONS.md: jetway %s --%s is in no configuration table", cmd, name)
				continue
			}
			if env, ok := bound[cmd][name]; ok && !slices.Contains(r.envs, env) {
				t.Errorf("OPERATIONS.md:%d: jetway %s --%s takes its default from %s; the row does not say so", r.line, cmd, name, env)
			}
		}
	}
	// Every variable our code reads is in the tables or said to be internal.
	var text strings.Builder
	for _, r := range rows {
		text.WriteString(strings.Join(r.envs, " ") + " ")
	}
	for env, file := range reads {
		if _, internal := internalEnv[env]; internal {
			continue
		}
		if !strings.Contains(" "+text.String(), " "+env+" ") {
			t.Errorf("OPERATIONS.md: %s (read in %s) is in no configuration table", env, strings.TrimPrefix(file, repoRoot+"/"))
		}
	}
}

// internalEnv are variables the code reads that are not settings: each
// with the reason it stays out of the tables.
var internalEnv = map[string]string{
	"JETWAY_TEST_REQUIRE_NPM": "a test setting (.ci/run): the published MCP servers' tests fail, not skip, when npm cannot install them",
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// sameDefault compares a documented default with pflag's rendering of it.
func sameDefault(doc, actual string) bool {
	if doc == actual {
		return true
	}
	if d1, err := time.ParseDuration(doc); err == nil {
		if d2, err := time.ParseDuration(actual); err == nil {
			return d1 == d2
		}
	}
	return (doc == "none" || doc == "unset") && (actual == "" || actual == "[]")
}

func TestDocs_name_only_JETWAY_variables_and_names_that_exist(t *testing.T) {
	// Whatever JETWAY_* word a doc uses must be somewhere in the code:
	// a variable something reads, a stream's name, a script's setting.
	var code strings.Builder
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != repoRoot && (strings.HasPrefix(n, ".") || n == "docs" || n == "bin" || n == "secrets") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") || strings.HasSuffix(path, ".sum") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && len(b) < 4<<20 {
			code.Write(b)
			code.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, w := range regexp.MustCompile(`JETWAY_[A-Z0-9_]*[A-Z0-9]`).FindAllString(code.String(), -1) {
		known[w] = true
	}
	docs, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	docs = append(docs, filepath.Join(repoRoot, "README.md"))
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, w := range regexp.MustCompile(`JETWAY_[A-Z0-9_]*[A-Z0-9]`).FindAllString(line, -1) {
				if !known[w] {
					t.Errorf("%s:%d: %s is nowhere in the code", strings.TrimPrefix(doc, repoRoot+"/"), i+1, w)
				}
			}
		}
	}
}

func TestScripts_settings_are_documented(t *testing.T) {
	// make run and make cluster read their settings in shell; each one a
	// script reads must be in the README or OPERATIONS.md.
	var docs strings.Builder
	for _, p := range []string{"README.md", "docs/OPERATIONS.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	scripts, _ := filepath.Glob(filepath.Join(repoRoot, "scripts", "*.sh"))
	read := regexp.MustCompile(`\$\{(JETWAY_[A-Z0-9_]+)[:}-]`)
	found := 0
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range read.FindAllStringSubmatch(string(b), -1) {
			found++
			if !regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(docs.String()) {
				t.Errorf("%s reads %s; neither README.md nor docs/OPERATIONS.md names it", filepath.Base(s), m[1])
			}
		}
	}
	if found == 0 {
		t.Fatal("found no ${JETWAY_…} in scripts/*.sh: has the way they read settings changed?")
	}
}

func TestEvery_flag_whose_default_a_variable_sets_names_it_in_its_help(t *testing.T) {
	// --help is the first place a person looks; a variable that silently
	// changes a default is a surprise there.
	reads := envReads(t, false)
	bound := envBindings(t, reads)
	if len(bound) == 0 {
		t.Fatal("found no flag whose default a variable sets: the scan is broken")
	}
	for name := range reads {
		if _, internal := internalEnv[name]; !internal {
			t.Setenv(name, "")
		}
	}
	flags := allFlags(newRootCmd())
	for cmd, fs := range bound {
		for name, env := range fs {
			if f := flags[cmd][name]; !strings.Contains(f.Usage, env) {
				t.Errorf("jetway %s --%s takes its default from %s; its usage does not say so: %q", cmd, name, env, f.Usage)
			}
		}
	}
}

// otherTools are flags the docs show for programs other than jetway: the
// nats CLI and nats-server, docker compose, podman and the container
// scripts, git, npm and npx, and the command-line
// shapes the redactor recognises.
var otherTools = map[string]string{
	"addr": "nats-server", "cluster": "nats-server", "routes": "nats-server", "store_dir": "nats-server", "signal": "nats-server",
	"user": "nats CLI", "password": "nats CLI, redaction examples", "inbox-prefix": "nats CLI", "server": "nats CLI",
	"config": "nats CLI", "last-for": "nats CLI", "nkey": "nats CLI (a tenant credential)", "tlsca": "nats CLI",
	"env-file": "docker compose", "build": "docker compose", "stat": "git log",
	"runtime": "podman", "ulimit": "podman", "volumes": "scripts/containers.sh down",
	"api-key": "a redaction example", "help": "every command",
	"prefix": "npm install (an npx server's cache)", "package": "npx",
}

func TestDocs_name_only_flags_that_exist(t *testing.T) {
	// A flag a doc shows in code must be one some jetway command (or the
	// provisioner) takes, or one of another program the doc runs.
	real := map[string]bool{}
	for _, fs := range allFlags(newRootCmd()) {
		for name := range fs {
			real[name] = true
		}
	}
	names, _ := provisionFlags(t)
	for _, n := range names {
		real[n] = true
	}
	for n := range benchFlags() {
		real[n] = true
	}
	code := regexp.MustCompile("`[^`]*`")
	flag := regexp.MustCompile(`(?:^|[\s\x60(])--([a-z][a-z0-9_-]*)`)
	docs, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	docs = append(docs, filepath.Join(repoRoot, "README.md"))
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			spans := code.FindAllString(line, -1)
			if fenced {
				spans = []string{line} // a shell example: every word counts
			}
			for _, span := range spans {
				for _, m := range flag.FindAllStringSubmatch(span, -1) {
					if _, other := otherTools[m[1]]; !real[m[1]] && !other {
						t.Errorf("%s:%d: no jetway command takes --%s", strings.TrimPrefix(doc, repoRoot+"/"), i+1, m[1])
					}
				}
			}
		}
	}
}

// anchor is GitHub's id for a heading: lower case, punctuation dropped,
// spaces as hyphens.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the ids of a markdown file's headings (a repeated heading
// gets -1, -2, … as on GitHub), skipping fenced code.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		id := anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func TestDocs_links_reach_files_and_headings_that_exist(t *testing.T) {
	// The docs are read by following links; a renamed heading must not
	// leave a link pointing nowhere.
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docs, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	docs = append(docs, filepath.Join(repoRoot, "README.md"))
	cache := map[string]map[string]bool{}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: %s does not exist", strings.TrimPrefix(doc, repoRoot+"/"), i+1, file)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				if cache[path] == nil {
					cache[path] = anchors(t, path)
				}
				if !cache[path][frag] {
					t.Errorf("%s:%d: %s has no heading #%s", strings.TrimPrefix(doc, repoRoot+"/"), i+1, filepath.Base(path), frag)
				}
			}
		}
	}
}

func TestREADME_commands_table_names_every_command(t *testing.T) {
	// The README's table is where a newcomer learns what the binary does;
	// a command missing there is a command nobody finds.
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Commands\n")
	if !ok {
		t.Fatal(`README.md: no "## Commands" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if cells := splitRow(line); strings.HasPrefix(line, "|") && len(cells) > 1 {
			for _, m := range backquoted.FindAllStringSubmatch(cells[0], -1) {
				listed[m[1]] = true
			}
		}
	}
	for cmd := range allFlags(newRootCmd()) {
		if !listed[cmd] {
			t.Errorf("README.md's commands table does not name %q", cmd)
		}
	}
	for cmd := range listed {
		if _, ok := allFlags(newRootCmd())[cmd]; !ok {
			t.Errorf("README.md's commands table names %q, which is no command", cmd)
		}
	}
}

// TestREADME_layout_names_every_package keeps the README's layout the map
// of the tree: every directory holding Go code is named there, on a line
// of its own or, for a helper inside another package (chat/ in
// pkg/client/), on its parent's line; and every line names a directory
// that exists.
func TestREADME_layout_names_every_package(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Repository layout\n")
	if !ok {
		t.Fatal(`README.md: no "## Repository layout" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	lines := map[string]string{} // directory (with its slash) → its line
	for _, line := range strings.Split(section, "\n") {
		if dir, _, ok := strings.Cut(line, " "); ok && strings.HasSuffix(dir, "/") {
			lines[dir] = line
			if _, err := os.Stat(filepath.Join(repoRoot, dir)); err != nil {
				t.Errorf("README.md's layout names %s: %v", dir, err)
			}
		}
	}
	for _, dir := range goDirs(t) {
		if !namedInLayout(lines, dir+"/") {
			t.Errorf("README.md's layout does not name %s/", dir)
		}
	}
}

// namedInLayout reports whether dir has a line of its own or is named,
// relative to it, on an ancestor's line.
func namedInLayout(lines map[string]string, dir string) bool {
	if _, ok := lines[dir]; ok {
		return true
	}
	for parent, line := range lines {
		rel, ok := strings.CutPrefix(dir, parent)
		if ok && (strings.Contains(line, " "+rel) || strings.Contains(line, "("+rel)) {
			return true
		}
	}
	return false
}

// goDirs are the directories of the module holding .go files, relative to
// its root, test data left out.
func goDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(seen))
}

// No built binary is committed: three times one was, from a `go build` at
// the repository's root (tens of megabytes each, in the history for good).
// Every tracked file is read; an ELF executable, or anything over 2 MB,
// fails the test with its name.
func TestThe_repository_tracks_no_built_binary(t *testing.T) {
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	const limit = 2 << 20
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		path := filepath.Join(repoRoot, name)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		if fi.Size() > limit {
			t.Errorf("%s is tracked and %d bytes: a built file? (keep it out, or in .gitignore)", name, fi.Size())
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		if n == 4 && string(head) == "\x7fELF" {
			t.Errorf("%s is tracked and is an ELF executable: a built binary (keep it out, or in .gitignore)", name)
		}
	}
}
