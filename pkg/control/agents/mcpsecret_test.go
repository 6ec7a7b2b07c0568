package agents_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"jetway/internal/mcptest"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
)

// secretEnv is the environment of the lookup tests: the victim's secret,
// a shared one, and an unscoped JETWAY_MCP_SECRET_<NAME> of the kind the
// lookup used to fall back to.
var secretEnv = map[string]string{
	mcptest.VictimVar:                       mcptest.VictimValue,
	"JETWAY_MCP_SHARED_SECRET_CI_TOKEN":     "shared-ci-value",
	"JETWAY_MCP_SECRET_GH_TOKEN":            "unscoped-value",
	"JETWAY_MCP_SECRET_ACME__GITHUB_TOKEN":  "acme-github-value",
	"JETWAY_MCP_SECRET_MY_2DORG__GH_TOKEN":  "my-org-value",
	"JETWAY_MCP_SECRET_VICTIM__VICTIM_NOTE": "victim-note-value",
}

func lookup(v string) (string, bool) { s, ok := secretEnv[v]; return s, ok }

func TestSecret_names_read_their_own_tenants_one_variable_and_shared_names_the_shared_one(t *testing.T) {
	for _, c := range []struct{ tenant, ref, variable string }{
		{"acme", "github-token", "JETWAY_MCP_SECRET_ACME__GITHUB_TOKEN"},
		{"acme", "tickets-token", "JETWAY_MCP_SECRET_ACME__TICKETS_TOKEN"},
		{"acme", "GITHUB_TOKEN", "JETWAY_MCP_SECRET_ACME__GITHUB_TOKEN"},
		{"globex", "web_auth", "JETWAY_MCP_SECRET_GLOBEX__WEB_AUTH"},
		{"default", "gh-token", "JETWAY_MCP_SECRET_DEFAULT__GH_TOKEN"},
		{"t1", "a1", "JETWAY_MCP_SECRET_T1__A1"},
		{"my-org", "gh-token", "JETWAY_MCP_SECRET_MY_2DORG__GH_TOKEN"},
		{"big_co", "gh-token", "JETWAY_MCP_SECRET_BIG_5FCO__GH_TOKEN"},
		{"Acme", "gh-token", "JETWAY_MCP_SECRET__41CME__GH_TOKEN"},
		{"acme", "shared:ci-token", "JETWAY_MCP_SHARED_SECRET_CI_TOKEN"},
		{"globex", "shared:CI_TOKEN", "JETWAY_MCP_SHARED_SECRET_CI_TOKEN"},
	} {
		got, err := agents.MCPSecretVar(c.tenant, c.ref)
		if err != nil || got != c.variable {
			t.Errorf("%s's %s is read from %q (%v), want %s", c.tenant, c.ref, got, err, c.variable)
		}
	}
	for _, c := range []struct{ tenant, ref, want string }{
		{"acme", "github-token", "acme-github-value"},
		{"my-org", "gh-token", "my-org-value"},
		{mcptest.Victim, mcptest.VictimSecret, mcptest.VictimValue},
		{"acme", "shared:ci-token", "shared-ci-value"},
		{mcptest.Victim, "shared:ci-token", "shared-ci-value"},
	} {
		if got, err := agents.ResolveMCPSecret(lookup, c.tenant, c.ref, "test"); err != nil || got != c.want {
			t.Errorf("%s's %s resolved to %q (%v), want %q", c.tenant, c.ref, got, err, c.want)
		}
	}
}

func TestA_missing_secret_names_the_exact_variable_to_set_and_no_value(t *testing.T) {
	for _, c := range []struct{ tenant, ref, variable string }{
		// Once read from the unscoped JETWAY_MCP_SECRET_GH_TOKEN, which
		// the environment holds: no longer.
		{"acme", "gh-token", "JETWAY_MCP_SECRET_ACME__GH_TOKEN"},
		{"acme", "ci-token", "JETWAY_MCP_SECRET_ACME__CI_TOKEN"},
		{"acme", "shared:gh-token", "JETWAY_MCP_SHARED_SECRET_GH_TOKEN"},
	} {
		v, err := agents.ResolveMCPSecret(lookup, c.tenant, c.ref, "jobs worker w1")
		if err == nil || v != "" {
			t.Errorf("%s's %s resolved to %q", c.tenant, c.ref, v)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "set "+c.variable+" there") || !strings.Contains(msg, "jobs worker w1") {
			t.Errorf("%s's %s: %q does not name %s and where", c.tenant, c.ref, msg, c.variable)
		}
		for _, val := range secretEnv {
			if strings.Contains(msg, val) {
				t.Errorf("%s's %s: %q holds a value", c.tenant, c.ref, msg)
			}
		}
	}
	if _, err := agents.ResolveMCPSecret(lookup, "acme", "../victim", "w1"); err == nil || !strings.Contains(err.Error(), `has '.'`) {
		t.Errorf("a name that is not one: %v, want it refused saying why", err)
	}
	if _, err := agents.ResolveMCPSecret(lookup, "", "gh-token", "w1"); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("no tenant: %v, want it refused naming the tenant", err)
	}
}

// surface is every function of the package that forms, reads or reports
// a secret's variable, each run as an attacker's profile would reach it:
// what it returns must hold neither the victim's value nor, where it is a
// variable to read, the victim's variable. TestThe_secret_lookup_surface
// fails when a function that forms variables or reads the environment is
// missing here.
var surface = map[string]func(tenant, ref string) (out string, variable string){
	"MCPSecretVar": func(tenant, ref string) (string, string) {
		v, _ := agents.MCPSecretVar(tenant, ref)
		return "", v
	},
	"ResolveMCPSecret": func(tenant, ref string) (string, string) {
		v, err := agents.ResolveMCPSecret(lookup, tenant, ref, "test")
		return fmt.Sprint(v, err), ""
	},
	"MCPSecretRefProblem": func(_, ref string) (string, string) { return agents.MCPSecretRefProblem(ref), "" },
	"MCPSecretVarTenant": func(tenant, ref string) (string, string) {
		v, _ := agents.MCPSecretVar(tenant, ref)
		if owner, ok := agents.MCPSecretVarTenant(v); ok && owner != tenant {
			return "", mcptest.VictimVar // read as another tenant's: as bad as the victim's
		}
		return "", ""
	},
	"UnreadMCPSecretVars": func(_, ref string) (string, string) {
		return strings.Join(agents.UnreadMCPSecretVars([]string{"JETWAY_MCP_SECRET_" + ref + "=" + mcptest.VictimValue}), ","), ""
	},
	"UnreadMCPSecretWarning": func(_, ref string) (string, string) {
		return agents.UnreadMCPSecretWarning([]string{"JETWAY_MCP_SECRET_" + ref}), ""
	},
}

func TestNo_spelling_in_another_tenants_profile_reaches_the_victims_secret(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(surface)) {
		for _, tenant := range mcptest.AttackerTenants {
			for _, ref := range mcptest.CrossTenantSpellings {
				out, v := surface[name](tenant, ref)
				if strings.Contains(out, mcptest.VictimValue) || v == mcptest.VictimVar {
					t.Errorf("%s: tenant %s naming %q reaches the victim's secret (%q, %s)", name, tenant, ref, out, v)
				}
			}
		}
	}
	// The victim's own profile still reads it.
	if v, err := agents.ResolveMCPSecret(lookup, mcptest.Victim, mcptest.VictimSecret, "test"); err != nil || v != mcptest.VictimValue {
		t.Fatalf("the victim's own name resolved to %q, %v", v, err)
	}
}

func TestThe_variable_of_a_tenants_secret_belongs_to_that_tenant_alone(t *testing.T) {
	// Every tenant token against every name: no variable of one tenant is
	// another's, and reading the variable back gives its tenant.
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aAbB0_-zZ9"
	owner := map[string]string{}
	names := []string{"a", "gh-token", "gh_token", "GH-TOKEN", "x1", "a-b-c", "a_b_c"}
	tenants := append(slices.Clone(mcptest.AttackerTenants), mcptest.Victim)
	for range 20000 {
		b := make([]byte, 1+r.IntN(6))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		tenants = append(tenants, string(b))
	}
	for _, tenant := range tenants {
		for _, name := range names {
			v, err := agents.MCPSecretVar(tenant, name)
			if err != nil {
				t.Fatalf("%s's %s: %v", tenant, name, err)
			}
			if o, ok := owner[v]; ok && o != tenant {
				t.Fatalf("%s is both %s's and %s's", v, o, tenant)
			}
			owner[v] = tenant
			if back, ok := agents.MCPSecretVarTenant(v); !ok || back != tenant {
				t.Fatalf("%s reads back as tenant %q (%v), want %q", v, back, ok, tenant)
			}
		}
	}
	for _, v := range []string{"JETWAY_MCP_SECRET_GH_TOKEN", "JETWAY_MCP_SECRET_ACME__GH__TOKEN", "JETWAY_MCP_SECRET__61CME__X",
		"JETWAY_MCP_SECRET_ACME___X", "JETWAY_MCP_SECRET_ACME__X_", "JETWAY_MCP_SECRET_AC_2dME__X", "JETWAY_MCP_SHARED_SECRET_X"} {
		if tenant, ok := agents.MCPSecretVarTenant(v); ok {
			t.Errorf("%s reads as tenant %s's; no profile makes it", v, tenant)
		}
	}
}

func TestThe_unscoped_variables_an_upgrade_leaves_are_reported_by_name(t *testing.T) {
	// The examples of docs/OPERATIONS.md: an unscoped one, and the
	// old form of tenant my-org's, which my_org's profiles read too.
	got := agents.UnreadMCPSecretVars([]string{"JETWAY_MCP_SECRET_GITHUB_TOKEN=old-value", mcptest.VictimVar + "=" + mcptest.VictimValue,
		"JETWAY_MCP_SHARED_SECRET_CI=x", "PATH=/bin", "JETWAY_MCP_SECRET_ACME__A__B=y", "JETWAY_MCP_SECRET_MY_ORG__GH_TOKEN=z",
		"JETWAY_MCP_SECRET_MY_2DORG__GH_TOKEN=z"})
	if !slices.Equal(got, []string{"JETWAY_MCP_SECRET_ACME__A__B", "JETWAY_MCP_SECRET_GITHUB_TOKEN", "JETWAY_MCP_SECRET_MY_ORG__GH_TOKEN"}) {
		t.Fatalf("unread = %v", got)
	}
	if w := agents.UnreadMCPSecretWarning(got); !strings.Contains(w, "no profile reads JETWAY_MCP_SECRET_ACME__A__B, JETWAY_MCP_SECRET_GITHUB_TOKEN") || strings.Contains(w, "old-value") ||
		!strings.Contains(w, "JETWAY_MCP_SHARED_SECRET_<NAME>") {
		t.Fatalf("warning %q", w)
	}
}

func TestA_profile_naming_a_secret_another_tenant_could_mean_is_refused_naming_the_field(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	for _, ref := range mcptest.CrossTenantSpellings {
		valid := agents.MCPSecretRefProblem(ref) == ""
		for _, s := range []dispatcherapi.AgentMCPServer{
			{Name: "files", Command: "mcp-files", Secrets: map[string]string{"GH_TOKEN": ref}},
			{Name: "web", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": ref}},
		} {
			field := "mcp[0].secrets.GH_TOKEN"
			if s.URL != "" {
				field = "mcp[0].headers.Authorization"
			}
			_, err := agents.Put(ctx, kv, "acme", "tooled", agents.Profile{Instructions: "x", MCP: []dispatcherapi.AgentMCPServer{s}})
			var fe *agents.FieldError
			switch {
			case valid && err != nil:
				t.Errorf("%q is a plain name of acme's own and was refused: %v", ref, err)
			case !valid && (!errors.As(err, &fe) || fe.Field != field || !strings.Contains(err.Error(), "letters and digits")):
				t.Errorf("%q in %s: %v, want a field error naming %s and the rule", ref, field, err, field)
			}
		}
	}
	for ref, why := range map[string]string{
		"victim--gh-token": `has "--", a run of separators`, "VICTIM__GH_TOKEN": `has "__", a run of separators`,
		"_victim": `starts with '_'`, "victim-": `ends with '-'`, "../victim": `has '.'`, "shared:": "the name after shared: is empty",
	} {
		if got := agents.MCPSecretRefProblem(ref); !strings.Contains(got, why) {
			t.Errorf("%q: %q, want it to say %s", ref, got, why)
		}
	}
}

// The variables secrets are read from are made in one file, read in one
// function, and called from known places. A new function that forms or
// reads them, or a new caller, fails here until it is added to surface
// (and so attacked by every spelling) or to the callers below, each of
// which has its own cross-tenant test.
func TestThe_secret_lookup_surface_is_enumerated(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	forming, reading := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if slices.Contains([]string{"mcpSecretPrefix", "mcpSharedSecretPrefix", "MCPSecretVar", "envTenant", "envName"}, n.Name) && n != fn.Name {
						forming[fn.Name.Name] = true
					}
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "os" && slices.Contains([]string{"LookupEnv", "Getenv", "Environ", "ExpandEnv", "Expand"}, n.Sel.Name) {
						reading[fn.Name.Name] = true
					}
				}
				return true
			})
		}
	}
	for name := range forming {
		if _, ok := surface[name]; !ok && ast.IsExported(name) {
			t.Errorf("%s forms secret variables and is not in surface: add it, so every spelling is tried on it", name)
		}
		if !ast.IsExported(name) {
			t.Errorf("%s forms secret variables outside the exported, attacked functions", name)
		}
	}
	if want := []string{"ResolveMCPSecret"}; !slices.Equal(slices.Sorted(maps.Keys(reading)), want) {
		t.Errorf("functions reading the environment: %v, want only %v", slices.Sorted(maps.Keys(reading)), want)
	}

	// Outside the package: who calls the surface, and that no code spells
	// a secret variable's prefix itself.
	root := filepath.Join("..", "..", "..")
	want := map[string][]string{
		"services/jobs/mcp.go":          {"ResolveMCPSecret"},
		"services/jobs/worker.go":       {"UnreadMCPSecretVars", "UnreadMCPSecretWarning"},
		"services/mcptools/mcptools.go": {"ResolveMCPSecret", "UnreadMCPSecretVars", "UnreadMCPSecretWarning"},
	}
	got := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "pkg/control/agents/mcpsecret.go" || strings.HasPrefix(rel, "internal/mcptest/") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING &&
					(strings.Contains(s, "JETWAY_MCP_SECRET") || strings.Contains(s, "JETWAY_MCP_SHARED")) {
					t.Errorf("%s: %s spells a secret variable; only agents.MCPSecretVar makes one", fset.Position(n.Pos()), n.Value)
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "agents" {
					if _, ok := surface[n.Sel.Name]; ok && !slices.Contains(got[rel], n.Sel.Name) {
						got[rel] = append(got[rel], n.Sel.Name)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for file, names := range got {
		slices.Sort(names)
		if !slices.Equal(names, want[file]) {
			t.Errorf("%s calls %v of the secret lookup, want %v: a new caller needs its own cross-tenant test, then a line here", file, names, want[file])
		}
	}
	for file := range want {
		if _, ok := got[file]; !ok {
			t.Errorf("%s no longer calls %v: update this list", file, want[file])
		}
	}
}

func TestA_credential_written_where_a_secret_name_belongs_is_refused_without_being_repeated(t *testing.T) {
	for _, ref := range []string{"ghp_abcdefghijklmnopqrstuvwxyz0123456789", "shared:ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789abcdefghij"} {
		why := agents.MCPSecretRefProblem(ref)
		if !strings.Contains(why, "looks like a secret") || strings.Contains(why, "abcdefghij") {
			t.Errorf("%s: %q, want refused without the value", ref[:8], why)
		}
		if _, err := agents.ResolveMCPSecret(lookup, "acme", ref, "w1"); err == nil || strings.Contains(err.Error(), "abcdefghij") {
			t.Errorf("%s: the lookup said %v", ref[:8], err)
		}
	}
}
