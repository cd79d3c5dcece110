// Package manifest reads the YAML or JSON documents that `kubectl apply -f` takes: a file, every
// .yaml, .yml and .json file of a directory, or standard input.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Document is one object of a manifest, with where it came from.
type Document struct {
	File string
	// Line is the 1-based line of the file where the document's first key is.
	Line   int
	Object *unstructured.Unstructured
}

// Where names a document for error messages: file:line.
func (d Document) Where() string { return fmt.Sprintf("%s:%d", d.File, d.Line) }

// ReadAll returns the documents of every path in order, as `kubectl apply -f` takes them: a file,
// a directory (its .yaml, .yml and .json files, not recursive) or "-" for stdin.
func ReadAll(paths []string, stdin io.Reader) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		d, err := Read(p, stdin)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

// Read returns the documents of path: a file, a directory (not recursive) or "-" for stdin.
// Empty documents are skipped; a document that is not an object is an error naming it.
func Read(path string, stdin io.Reader) ([]Document, error) {
	if path == "-" {
		return Decode("-", stdin)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if fi.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			ext := strings.ToLower(filepath.Ext(e.Name()))
			if !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(files)
	}
	var docs []Document
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		d, err := Decode(f, bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

// separator is a YAML document separator line.
var separator = regexp.MustCompile(`^---\s*(#.*)?$`)

// Decode splits a YAML or JSON stream into objects, each with the line it starts on.
func Decode(name string, r io.Reader) ([]Document, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var docs []Document
	for _, chunk := range split(data) {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(chunk.data), 4096)
		for {
			var obj map[string]any
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, chunk.line, err)
			}
			if obj == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GetKind() == "" || u.GetAPIVersion() == "" {
				return nil, fmt.Errorf("%s:%d: apiVersion and kind are required", name, chunk.line)
			}
			docs = append(docs, Document{File: name, Line: chunk.line, Object: u})
		}
	}
	return docs, nil
}

// chunk is one YAML document of a stream (or a whole JSON stream) and its first content line.
type chunk struct {
	data []byte
	line int
}

// split cuts a stream at its YAML separator lines; a JSON stream is one chunk. Each chunk's line
// is that of its first line that is neither blank nor a comment.
func split(data []byte) []chunk {
	lines := bytes.SplitAfter(data, []byte("\n"))
	var out []chunk
	cur := chunk{}
	for i, l := range lines {
		trimmed := bytes.TrimSpace(l)
		if separator.Match(trimmed) && !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
			out = append(out, cur)
			cur = chunk{}
			continue
		}
		if cur.line == 0 && len(trimmed) > 0 && trimmed[0] != '#' {
			cur.line = i + 1
		}
		cur.data = append(cur.data, l...)
	}
	out = append(out, cur)
	var kept []chunk
	for _, c := range out {
		if c.line > 0 {
			kept = append(kept, c)
		}
	}
	return kept
}
