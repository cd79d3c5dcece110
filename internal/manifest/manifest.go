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
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Document is one object of a manifest, with where it came from.
type Document struct {
	File   string
	Index  int // 1-based position in its file
	Object *unstructured.Unstructured
}

// Where names a document for error messages: file:N.
func (d Document) Where() string { return fmt.Sprintf("%s:%d", d.File, d.Index) }

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

// Decode splits a YAML or JSON stream into objects.
func Decode(name string, r io.Reader) ([]Document, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var docs []Document
	for i := 1; ; i++ {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, i, err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s:%d: apiVersion and kind are required", name, i)
		}
		docs = append(docs, Document{File: name, Index: i, Object: u})
	}
}
