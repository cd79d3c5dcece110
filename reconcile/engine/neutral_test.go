package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"evals.si/operator/evalsi"
)

// TestEngineNamesNoKind parses the engine's files and fails on anything that names an evals.si
// kind: a kind, resource or controller name as a string, a kind's resource, finalizer or children
// from package evalsi, or an import of the packages that know the kinds (render, apiclient). Kinds
// register themselves (Kind); the engine knows none.
func TestEngineNamesNoKind(t *testing.T) {
	words := map[string]bool{}
	for _, k := range evalsi.Kinds {
		words[k.Kind], words[strings.ToLower(k.Kind)], words[k.Resource.Resource], words[k.Controller] = true, true, true, true
	}
	// namesAKind is whether an identifier of package evalsi belongs to a kind: the table itself,
	// a kind's entry or resource (EvaluatorKind, Evaluators, OnlineEvalPolicies), the children.
	namesAKind := func(ident string) bool {
		if ident == "Kinds" || ident == "KindNamed" || ident == "ChildResources" || strings.HasPrefix(ident, "Finalizer") {
			return true
		}
		for _, k := range evalsi.Kinds {
			if strings.HasPrefix(ident, strings.TrimSuffix(k.Kind, "y")) {
				return true
			}
		}
		return false
	}
	files, err := filepath.Glob("*.go")
	if err == nil {
		var leaf []string
		leaf, err = filepath.Glob("cached/*.go")
		files = append(files, leaf...)
	}
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasSuffix(p, "/render") || strings.Contains(p, "/apiclient") || strings.Contains(p, "/reconcile/") && !strings.Contains(p, "/reconcile/engine/") {
				t.Errorf("%s imports %s, which knows the kinds", path, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.BasicLit:
				if v, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING && words[v] {
					t.Errorf("%s: %q names a kind", fset.Position(x.Pos()), v)
				}
			case *ast.SelectorExpr:
				if pkg, ok := x.X.(*ast.Ident); ok && pkg.Name == "evalsi" && namesAKind(x.Sel.Name) {
					t.Errorf("%s: evalsi.%s belongs to a kind", fset.Position(x.Pos()), x.Sel.Name)
				}
			}
			return true
		})
	}
}
