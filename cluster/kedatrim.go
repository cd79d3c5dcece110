package cluster

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The scalers the test KEDA is built with: the operator renders metrics-api triggers only, and
// cpu and memory are KEDA's resource triggers. Every other scaler (about seventy, with the cloud
// SDKs, message-queue and database clients they import) is left out of the build: they were more
// than half of KEDA's source to compile (176 MB of Go in 3,337 packages against 75 MB in 1,566),
// and most of a cold CI run's KEDA build. The ScaledObject controller, the HPA it makes, the
// admission webhooks and the metrics-api scaler are KEDA's code, unchanged.
var (
	kedaScalerFiles        = []string{"scaler.go", "metrics_api_scaler.go", "cpu_memory_scaler.go"}
	kedaScalerConstructors = []string{"NewMetricsAPIScaler", "NewCPUMemoryScaler"}
)

// kedaTrimmedDecls declares what the kept scalers use from files left out.
const kedaTrimmedDecls = `package scalers

// externalMetricType is declared in azure_queue_scaler.go, which this build leaves out.
const externalMetricType = "External"
`

// trimKeda copies KEDA's module from src (the read-only module cache) to dst without its tests,
// with only the scalers above: pkg/scalers keeps their files, and buildScaler in
// pkg/scaling/scalers_builder.go keeps only the cases that construct them (any other trigger
// type gets KEDA's own "no scaler found for type" error).
func trimKeda(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	scalers := filepath.Join("pkg", "scalers")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		name := d.Name()
		if strings.HasSuffix(name, "_test.go") {
			return nil
		}
		if filepath.Dir(rel) == scalers && strings.HasSuffix(name, ".go") && !slices.Contains(kedaScalerFiles, name) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		return fmt.Errorf("copying KEDA's module: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, scalers, "trimmed.go"), []byte(kedaTrimmedDecls), 0o644); err != nil {
		return err
	}
	builder := filepath.Join(dst, "pkg", "scaling", "scalers_builder.go")
	data, err := os.ReadFile(builder)
	if err != nil {
		return err
	}
	trimmed, err := trimScalerSwitch(data)
	if err != nil {
		return fmt.Errorf("trimming %s: %w", builder, err)
	}
	return os.WriteFile(builder, trimmed, 0o644)
}

// trimScalerSwitch returns the source of scalers_builder.go with buildScaler's switch keeping the
// default case and the cases that call a kept constructor.
func trimScalerSwitch(src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "scalers_builder.go", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var sw *ast.SwitchStmt
	for _, decl := range f.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "buildScaler" {
			for _, stmt := range fn.Body.List {
				if s, ok := stmt.(*ast.SwitchStmt); ok {
					sw = s
				}
			}
		}
	}
	if sw == nil {
		return nil, fmt.Errorf("no switch in buildScaler")
	}
	comments := ast.NewCommentMap(fset, f, f.Comments)
	var kept []ast.Stmt
	for _, stmt := range sw.Body.List {
		clause := stmt.(*ast.CaseClause)
		if clause.List == nil || callsAny(clause, kedaScalerConstructors) {
			kept = append(kept, clause)
		}
	}
	if len(kept) != len(kedaScalerConstructors)+2 { // cpu and memory share a constructor; default
		return nil, fmt.Errorf("kept %d cases of buildScaler, want %d", len(kept), len(kedaScalerConstructors)+2)
	}
	sw.Body.List = kept
	f.Comments = comments.Filter(f).Comments()
	var out bytes.Buffer
	if err := format.Node(&out, fset, f); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// callsAny reports whether node calls scalers.<name> for one of names.
func callsAny(node ast.Node, names []string) bool {
	found := false
	ast.Inspect(node, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "scalers" && slices.Contains(names, sel.Sel.Name) {
				found = true
			}
		}
		return !found
	})
	return found
}
