package evalsi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// foreign are literals that spell a vocabulary word with another meaning.
var foreign = map[string][]string{
	"cluster/cluster.go":                  {"evalsi"},                    // the local kubeconfig's cluster and context names
	"cluster/nodes.go":                    {"Ready"},                     // a Node's condition type
	"cmd/evalsi-release/release/build.go": {"evalsi", "evalsi-operator"}, // the evalsi chart's name; the image's name
	"main.go":                             {"evalsi-operator"},           // the program's name
	"cluster/assets.go":                   {"evalsi-operator"},           // the cache directory's name
}

// TestVocabularyHasOneHome parses every non-test Go file of the module outside this package (and
// the generated protobuf code) and fails on a string literal that spells one of this package's
// constants: a reason, annotation, label, finalizer or phase is written once, here.
func TestVocabularyHasOneHome(t *testing.T) {
	words := vocabulary(t)
	if len(words) < 40 {
		t.Fatalf("read only %d words from the vocabulary", len(words))
	}
	root := ".."
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "evalsi", "testdata", "apiclient/evalsiv1", ".git", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil || !words[v] || isForeign(rel, v) {
				return true
			}
			t.Errorf("%s: %q is a word of package evalsi: use its constant", fset.Position(lit.Pos()), v)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func isForeign(file, word string) bool {
	for _, w := range foreign[filepath.ToSlash(file)] {
		if w == word {
			return true
		}
	}
	return false
}

// vocabulary returns the string values of this package's constants: literals, and literals
// joined to Group.
func vocabulary(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "evalsi.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if v, ok := stringValue(vs.Values[i], values); ok {
					values[name.Name] = v
				}
			}
		}
	}
	words := map[string]bool{}
	for _, v := range values {
		words[v] = true
	}
	return words
}

// stringValue evaluates a constant made of string literals, names of earlier constants and +.
func stringValue(e ast.Expr, known map[string]string) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		v, err := strconv.Unquote(x.Value)
		return v, err == nil
	case *ast.Ident:
		v, ok := known[x.Name]
		return v, ok
	case *ast.BinaryExpr:
		a, aok := stringValue(x.X, known)
		b, bok := stringValue(x.Y, known)
		return a + b, aok && bok && x.Op == token.ADD
	}
	return "", false
}
