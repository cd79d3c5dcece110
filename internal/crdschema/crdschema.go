// Package crdschema writes the spec schemas of the evalsi CRDs from the kinds' JSON schemas
// (schemas/*.json) and the evalsid protos' comments (apiclient/proto), so that `kubectl explain`
// describes every spec field from the one place each is written. Each field carries its
// description and, for a scalar the JSON schema gives one type, that type; objects and lists get
// none and every node preserves unknown fields. So the API server refuses a scalar of the wrong
// JSON type before admission, as validation would, and nothing validation accepts
// (TestAPIServerRefusesNothingValidateAccepts); a field of the wrong shape (a string where an
// object belongs) still reaches validation, which names it, rather than failing the created-by
// policy's typed patch (chart/TestCreatorRecordedWhateverTheSpecsShape). The admission webhook,
// with the JSON schemas themselves, judges everything else: fields unknown, formats, ranges,
// rules across fields.
package crdschema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"evals.si/operator/evalsi"
	"evals.si/operator/schemas"
)

// Source is what the spec schemas are written from: the kinds' JSON schemas and the protos.
type Source struct {
	schemas map[string]map[string]any // by file name
	protos  map[string]message        // by message name
}

// message is a proto message's fields, by JSON name.
type message map[string]protoField

// protoField is a proto field: its type (a message name, or a scalar's) and its leading comment.
type protoField struct {
	typ, comment string
}

// Read takes the kinds' JSON schemas from package schemas, the ones validation compiles, and
// reads the .proto files in protoDir.
func Read(protoDir string) (*Source, error) {
	src := &Source{schemas: map[string]map[string]any{}, protos: map[string]message{}}
	for _, k := range evalsi.Kinds {
		schema, common, err := schemas.Source(k.Kind)
		if err != nil {
			return nil, err
		}
		for file, data := range map[string][]byte{k.SchemaFile(): schema, "common.json": common} {
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			src.schemas[file] = doc
		}
	}
	files, err := filepath.Glob(filepath.Join(protoDir, "*.proto"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for name, m := range parseMessages(string(data)) {
			src.protos[name] = m
		}
	}
	return src, nil
}

// Spec is the CRD schema of kind's spec: each property with its type when the
// JSON schema gives one, and its description, from the JSON schema or, for a kind whose spec is a
// proto message, from the field's comment. A property described in both places, or in neither, is
// an error: each has one source.
func (s *Source) Spec(kind string) (map[string]any, error) {
	k, ok := evalsi.KindNamed(kind)
	if !ok {
		return nil, fmt.Errorf("%q is not an evals.si kind", kind)
	}
	file := k.SchemaFile()
	root, ok := s.schemas[file]
	if !ok {
		return nil, fmt.Errorf("no schema %s", file)
	}
	var msg message
	if name := k.SpecMessage; name != "" {
		if msg, ok = s.protos[name]; !ok {
			return nil, fmt.Errorf("%s: no proto message %s", kind, name)
		}
	}
	return s.node(file, root, msg, "spec")
}

// node is the CRD schema of the JSON schema node n of file, at path, described by msg's fields
// when msg is set.
func (s *Source) node(file string, n map[string]any, msg message, path string) (map[string]any, error) {
	file, n, err := s.resolve(file, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]any{}
	switch t := jsonType(n); t {
	case "":
		out["x-kubernetes-preserve-unknown-fields"] = true
	case "object":
		out["x-kubernetes-preserve-unknown-fields"] = true
		props, _ := n["properties"].(map[string]any)
		if len(props) == 0 {
			break
		}
		outProps := map[string]any{}
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			p, _ := props[name].(map[string]any)
			at := path + "." + name
			field, inProto := msg[name]
			var sub message
			if inProto {
				sub = s.protos[field.typ]
			}
			prop, err := s.node(file, p, sub, at)
			if err != nil {
				return nil, err
			}
			desc, err := s.description(file, p, field.comment, at)
			if err != nil {
				return nil, err
			}
			prop["description"] = desc
			outProps[name] = prop
		}
		out["properties"] = outProps
	case "array":
		out["x-kubernetes-preserve-unknown-fields"] = true
		items, _ := n["items"].(map[string]any)
		item, err := s.node(file, items, msg, path+"[]")
		if err != nil {
			return nil, err
		}
		out["items"] = item
	default:
		out["type"] = t
	}
	return out, nil
}

// description is the description of property p at path: its own, else the definition's it
// refers to, else the proto field's comment; exactly one of the schema's and the comment.
func (s *Source) description(file string, p map[string]any, comment, path string) (string, error) {
	desc, _ := p["description"].(string)
	if desc == "" {
		if _, def, err := s.resolve(file, p); err == nil {
			desc, _ = def["description"].(string)
		}
	}
	switch {
	case desc != "" && comment != "":
		return "", fmt.Errorf("%s is described twice, in the JSON schema and in the proto: describe it in one", path)
	case desc == "" && comment == "":
		return "", fmt.Errorf("%s has no description: give it one in the JSON schema (or the proto, for a proto's field)", path)
	case desc != "":
		return desc, nil
	}
	return comment, nil
}

// resolve follows n's $ref, to a definition of file or of another schema file, and returns the
// node with the file it is in. A node that refers and says more keeps its own keywords.
func (s *Source) resolve(file string, n map[string]any) (string, map[string]any, error) {
	for range 8 {
		ref, ok := n["$ref"].(string)
		if !ok {
			return file, n, nil
		}
		target, pointer, _ := strings.Cut(ref, "#")
		if target != "" {
			file = target
		}
		doc, ok := s.schemas[file]
		if !ok {
			return "", nil, fmt.Errorf("$ref %s: no schema %s", ref, file)
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		def, ok := cur.(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("$ref %s: nothing there", ref)
		}
		merged := map[string]any{}
		for k, v := range def {
			merged[k] = v
		}
		for k, v := range n {
			if k != "$ref" {
				merged[k] = v
			}
		}
		n = merged
	}
	return "", nil, fmt.Errorf("$ref chain too long")
}

// jsonType is the one type the JSON schema node allows, as a CRD schema names it, or "" when it
// allows several or says none: "string" for an enum of strings.
func jsonType(n map[string]any) string {
	switch t := n["type"].(type) {
	case string:
		return t
	case nil:
		values, _ := n["enum"].([]any)
		for _, v := range values {
			if _, ok := v.(string); !ok {
				return ""
			}
		}
		if len(values) > 0 {
			return "string"
		}
	}
	return ""
}

// The lines of a proto file parseMessages reads.
var (
	messageLine = regexp.MustCompile(`^\s*message\s+(\w+)\s*\{`)
	fieldLine   = regexp.MustCompile(`^\s*(?:repeated\s+|optional\s+)?(map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+`)
)

// parseMessages reads the messages of a proto file: each field's type and the comment lines
// right above it, joined.
func parseMessages(text string) map[string]message {
	out := map[string]message{}
	var cur message
	var comment []string
	depth := 0
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case messageLine.MatchString(line) && depth == 0:
			cur = message{}
			out[messageLine.FindStringSubmatch(line)[1]] = cur
			depth, comment = 1, nil
			continue
		case strings.HasPrefix(trimmed, "//"):
			comment = append(comment, strings.TrimSpace(strings.TrimPrefix(trimmed, "//")))
			continue
		case depth == 1 && fieldLine.MatchString(line):
			m := fieldLine.FindStringSubmatch(line)
			cur[lowerCamel(m[2])] = protoField{typ: m[1], comment: strings.Join(comment, " ")}
		}
		if depth > 0 {
			depth += strings.Count(line, "{") - strings.Count(line, "}")
		}
		comment = nil
	}
	return out
}

// lowerCamel is a proto field name as its JSON name: api_key_env -> apiKeyEnv.
func lowerCamel(name string) string {
	parts := strings.Split(name, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// specLine is the line of a CRD's openAPIV3Schema that starts the spec's schema.
var specLine = regexp.MustCompile(`^(\s+)spec:\s*$`)

// Rewrite returns the CRD text crd with its spec schema's properties set to those of spec (what
// Spec returned), and the rest of the text as it was: the spec's own description, type and
// validations, and every other part of the CRD.
func Rewrite(crd []byte, spec map[string]any) ([]byte, error) {
	lines := strings.Split(string(crd), "\n")
	start := -1
	for i, line := range lines {
		if strings.TrimSpace(line) == "openAPIV3Schema:" {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no openAPIV3Schema")
	}
	for i := start + 1; i < len(lines); i++ {
		m := specLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent := m[1]
		end := i + 1
		for end < len(lines) && (strings.TrimSpace(lines[end]) == "" || strings.HasPrefix(lines[end], indent+" ")) {
			end++
		}
		var old map[string]any
		if err := yaml.Unmarshal([]byte(dedent(lines[i:end], indent)), &old); err != nil {
			return nil, fmt.Errorf("the spec's schema: %w", err)
		}
		merged, _ := old["spec"].(map[string]any)
		if merged == nil {
			merged = map[string]any{}
		}
		for k, v := range spec {
			merged[k] = v
		}
		out, err := yaml.Marshal(map[string]any{"spec": merged})
		if err != nil {
			return nil, err
		}
		var block []string
		for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			block = append(block, indent+l)
		}
		rewritten := append(append(append([]string{}, lines[:i]...), block...), lines[end:]...)
		return []byte(strings.Join(rewritten, "\n")), nil
	}
	return nil, fmt.Errorf("no spec in openAPIV3Schema's properties")
}

// dedent is lines without their first indent characters.
func dedent(lines []string, indent string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(out, "\n")
}
