package evalsi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"evals.si/operator/evalsi"
)

// maxFilesToAddAKind is how many files adding a kind may touch.
const maxFilesToAddAKind = 10

// TestAddingAKindTouchesTheListedFiles holds the list of files that adding a kind touches, in
// reconcile/doc.go, to the code: every hand-written file of the operator that names each kind
// (by its kind or its resource, in code or in data, not in a comment) is a list that a new kind
// joins, and must be on it. The list is at most ten files, and each of its files that a kind's
// names spell out exists for every kind.
func TestAddingAKindTouchesTheListedFiles(t *testing.T) {
	listed := filesToAddAKind(t)
	if len(listed) > maxFilesToAddAKind {
		t.Errorf("adding a kind touches %d files, more than %d: %q", len(listed), maxFilesToAddAKind, listed)
	}
	for _, f := range namingEveryKind(t) {
		if !slices.ContainsFunc(listed, func(pattern string) bool { return matchesListed(pattern, f) }) {
			t.Errorf("%s names every kind, so adding a kind touches it, and reconcile/doc.go does not list it: read the kinds from evalsi.Kinds there, or list it", f)
		}
	}
	for _, k := range evalsi.Kinds {
		for _, pattern := range listed {
			if strings.Contains(pattern, "<package>") {
				continue // where the kind's function lives is the author's choice
			}
			f := strings.NewReplacer("<kind>", strings.ToLower(k.Kind), "<resource>", k.Resource.Resource).Replace(pattern)
			if f == pattern || strings.HasPrefix(pattern, "render/<kind>") {
				continue // no name spelled out, or one of several files a renderer may take
			}
			if _, err := os.Stat("../" + f); err != nil {
				t.Errorf("kind %s: the listed %s: %v", k.Kind, pattern, err)
			}
		}
	}
}

// filesToAddAKind reads the files reconcile/doc.go lists under "Adding a kind", each a path or a
// pattern with <kind>, <resource> or <package> in it.
func filesToAddAKind(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../reconcile/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "// # Adding a kind\n")
	if !ok {
		t.Fatal(`reconcile/doc.go has no "# Adding a kind" section`)
	}
	section, _, _ = strings.Cut(section, "\n//\n// Beside them")
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^//   - ([^:]+):`).FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal("reconcile/doc.go lists no file under Adding a kind")
	}
	return out
}

// matchesListed reports whether file is the listed pattern, with <kind>, <resource> and
// <package> standing for one path element, or a part of one (render/<kind>.go matches
// render/apispecs.go too).
func matchesListed(pattern, file string) bool {
	glob := strings.NewReplacer("<kind>", "*", "<resource>", "*", "<package>", "*").Replace(pattern)
	ok, _ := path.Match(glob, file)
	return ok
}

// namingEveryKind returns the hand-written files of the operator that name each of the kinds: not
// tests, test data, documentation, examples or files `make golden` writes, nor the platform API's
// proto and evalsid's service.
func namingEveryKind(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Fatalf("listing the checkout's files: %v", err)
	}
	var names []*regexp.Regexp
	for _, k := range evalsi.Kinds {
		names = append(names, regexp.MustCompile(`(?i)(^|[^a-z])(`+k.Kind+`|`+k.Resource.Resource+`)`))
	}
	var every []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if notTheOperatorsOwn(f) {
			continue
		}
		data, err := os.ReadFile("../" + f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree
			}
			t.Fatal(err)
		}
		texts := []string{string(data)}
		if strings.HasSuffix(f, ".go") {
			texts = codeTexts(t, f, data)
		}
		if !slices.ContainsFunc(names, func(re *regexp.Regexp) bool {
			return !slices.ContainsFunc(texts, re.MatchString)
		}) {
			every = append(every, f)
		}
	}
	if len(every) == 0 {
		t.Fatal("no file names every kind, not even evalsi/kinds.go: the search finds nothing")
	}
	return every
}

// notTheOperatorsOwn reports whether f is left out of the count: tests, test data, docs,
// examples, benchmarks, generated files, and the platform API's (its protos and evalsid).
func notTheOperatorsOwn(f string) bool {
	for _, prefix := range []string{"docs/", "examples/", "bench/", "evalsid/", "apiclient/"} {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	for _, suffix := range []string{"_test.go", ".md", ".pb.go", "/files/kinds.yaml"} {
		if strings.HasSuffix(f, suffix) {
			return true
		}
	}
	return strings.Contains(f, "testdata/")
}

// codeTexts returns the identifiers and literals of the Go file f: its code without comments.
func codeTexts(t *testing.T, f string, data []byte) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), f, data, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parsing %s: %v", f, err)
	}
	var out []string
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			out = append(out, n.Name)
		case *ast.BasicLit:
			out = append(out, n.Value)
		}
		return true
	})
	return out
}
