package runner

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxActorMethods bounds the session actor: it is the delivery and run
// state machine, and a capability that lands in it as methods (it grew
// from 44 to 65 with sub-agents) belongs in a type or package of its own.
const maxActorMethods = 40

func TestThe_session_actor_has_at_most_40_methods(t *testing.T) {
	names := methodsOf(t, ".", "actor")
	if len(names) > maxActorMethods {
		t.Fatalf("actor has %d methods, at most %d: move a capability into its own type or package\n%s",
			len(names), maxActorMethods, strings.Join(names, "\n"))
	}
}

// methodsOf lists the methods of type typ declared in dir's non-test Go
// files, by name.
func methodsOf(t *testing.T, dir, typ string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && receiverIs(fd, typ) {
				names = append(names, fd.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// receiverIs reports whether fd is a method of typ (value or pointer
// receiver).
func receiverIs(fd *ast.FuncDecl, typ string) bool {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return false
	}
	expr := fd.Recv.List[0].Type
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	id, ok := expr.(*ast.Ident)
	return ok && id.Name == typ
}
