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
	for _, gvr := range []string{evalsi.EvalRuns.Resource, evalsi.OnlineEvalPolicies.Resource, evalsi.TraceSources.Resource,
		evalsi.Evaluators.Resource, evalsi.SandboxClasses.Resource, evalsi.CheckpointServers.Resource} {
		words[gvr] = true
	}
	for _, k := range []string{"EvalRun", "OnlineEvalPolicy", "TraceSource", "Evaluator", "SandboxClass", "CheckpointServer",
		"evalrun", "onlineevalpolicy", "tracesource", "evaluator", "sandboxclass", "checkpointserver"} {
		words[k] = true
	}
	names := map[string]bool{"EvalRuns": true, "OnlineEvalPolicies": true, "TraceSources": true, "Evaluators": true,
		"SandboxClasses": true, "CheckpointServers": true, "ChildResources": true}
	files, err := filepath.Glob("*.go")
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
			if strings.HasSuffix(p, "/render") || strings.Contains(p, "/apiclient") || strings.Contains(p, "/reconcile/") {
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
				if pkg, ok := x.X.(*ast.Ident); ok && pkg.Name == "evalsi" && (names[x.Sel.Name] || strings.HasPrefix(x.Sel.Name, "Finalizer")) {
					t.Errorf("%s: evalsi.%s belongs to a kind", fset.Position(x.Pos()), x.Sel.Name)
				}
			}
			return true
		})
	}
}
