package dispatcher

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// maxMethods bounds every type of the package, the Dispatcher first: a
// type past it has become a room for more than one concept again, which is
// what split the dispatcher into one core per resource (cores.go).
const maxMethods = 40

// methodCounts counts the methods declared on each receiver type in the
// package's non-test files, read as source so that the count is of what a
// reader meets, not of what embedding promotes.
func methodCounts(t *testing.T) map[string]int {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatalf("read the package directory: %v", err)
	}
	fset := token.NewFileSet()
	counts := map[string]int{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			counts[receiverName(fn.Recv.List[0].Type)]++
		}
	}
	return counts
}

// receiverName is T for a receiver of type T or *T.
func receiverName(e ast.Expr) string {
	if star, ok := e.(*ast.StarExpr); ok {
		e = star.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}

func TestDispatcher_has_at_most_40_methods(t *testing.T) {
	counts := methodCounts(t)
	if counts["Dispatcher"] == 0 {
		t.Fatal("found no methods of Dispatcher: is the parse reading the package?")
	}
	if n := counts["Dispatcher"]; n > maxMethods {
		t.Fatalf("Dispatcher has %d methods, at most %d: give the new ones to the core of their resource", n, maxMethods)
	}
}

func TestEvery_core_and_transport_has_at_most_40_methods(t *testing.T) {
	counts := methodCounts(t)
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Logf("%s: %d methods", name, counts[name])
		if counts[name] > maxMethods {
			t.Errorf("%s has %d methods, at most %d: split it by what its methods are about", name, counts[name], maxMethods)
		}
	}
}
