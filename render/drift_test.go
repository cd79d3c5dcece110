package render

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/schemas"
)

// TestSchemasMatchGoTypes holds each kind's JSON schema (what admission and the CLI check) and
// the type its spec is decoded into (a Go struct for workload kinds, the API message for the
// others) to the same fields, at every depth, with compatible types. A property in one and not
// the other fails here, before a user meets a spec that validates and does not decode.
func TestSchemasMatchGoTypes(t *testing.T) {
	goTypes := map[string]reflect.Type{
		"Evaluator":        reflect.TypeFor[EvaluatorSpec](),
		"SandboxClass":     reflect.TypeFor[SandboxClassSpec](),
		"CheckpointServer": reflect.TypeFor[CheckpointServerSpec](),
	}
	messages := map[string]protoreflect.MessageDescriptor{
		"EvalRun":          (&v1.RunSpec{}).ProtoReflect().Descriptor(),
		"OnlineEvalPolicy": (&v1.PolicySpec{}).ProtoReflect().Descriptor(),
		"TraceSource":      (&v1.TraceSourceSpec{}).ProtoReflect().Descriptor(),
	}
	for _, kind := range []string{"Evaluator", "SandboxClass", "CheckpointServer", "EvalRun", "OnlineEvalPolicy", "TraceSource"} {
		t.Run(kind, func(t *testing.T) {
			s := loadSchema(t, kind)
			var drift []string
			if typ, ok := goTypes[kind]; ok {
				s.compareGo("/spec", s.root, typ, &drift)
			} else {
				s.compareMessage("/spec", s.root, messages[kind], &drift)
			}
			for _, d := range drift {
				t.Error(d)
			}
		})
	}
}

// TestDriftIsSeen checks that the comparison above fails on a field that only one side has.
func TestDriftIsSeen(t *testing.T) {
	s := loadSchema(t, "Evaluator")
	type extra struct {
		EvaluatorSpec
		Replicaz int32 `json:"replicaz"`
	}
	var drift []string
	s.compareGo("/spec", s.root, reflect.TypeFor[extra](), &drift)
	if len(drift) == 0 || !strings.Contains(drift[0], "replicaz") {
		t.Fatalf("an extra Go field was not seen: %v", drift)
	}
}

type schemaDoc struct {
	root, common map[string]any
}

func loadSchema(t *testing.T, kind string) schemaDoc {
	t.Helper()
	raw, common, err := schemas.Source(kind)
	if err != nil {
		t.Fatal(err)
	}
	var s schemaDoc
	if err := json.Unmarshal(raw, &s.root); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(common, &s.common); err != nil {
		t.Fatal(err)
	}
	return s
}

// resolve follows a $ref into common.json's definitions.
func (s schemaDoc) resolve(node map[string]any) map[string]any {
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		name := ref[strings.LastIndex(ref, "/")+1:]
		node = s.common["$defs"].(map[string]any)[name].(map[string]any)
	}
}

// schemaTypes returns the JSON types a node allows ("string" for an enum of strings).
func schemaTypes(node map[string]any) []string {
	switch t := node["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, x.(string))
		}
		return out
	}
	if _, ok := node["enum"]; ok {
		return []string{"string"}
	}
	return nil
}

func (s schemaDoc) compareGo(path string, node map[string]any, typ reflect.Type, drift *[]string) {
	node = s.resolve(node)
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := func(types ...string) {
		got := schemaTypes(node)
		for _, w := range types {
			if slices.Contains(got, w) {
				return
			}
		}
		*drift = append(*drift, fmt.Sprintf("%s: the schema says %v, the Go type is %s", path, got, typ))
	}
	switch typ.Kind() {
	case reflect.Struct:
		want("object")
		props, _ := node["properties"].(map[string]any)
		fields := jsonFields(typ)
		for name, f := range fields {
			p, ok := props[name]
			if !ok {
				*drift = append(*drift, fmt.Sprintf("%s/%s: in the Go type, not in the schema", path, name))
				continue
			}
			s.compareGo(path+"/"+name, p.(map[string]any), f, drift)
		}
		for name := range props {
			if _, ok := fields[name]; !ok {
				*drift = append(*drift, fmt.Sprintf("%s/%s: in the schema, not in the Go type", path, name))
			}
		}
		if node["additionalProperties"] != false {
			*drift = append(*drift, fmt.Sprintf("%s: the schema must refuse unknown fields, as decoding does", path))
		}
	case reflect.Slice:
		want("array")
		items, _ := node["items"].(map[string]any)
		s.compareGo(path+"/0", items, typ.Elem(), drift)
	case reflect.Map:
		want("object")
		if _, ok := node["properties"]; ok {
			*drift = append(*drift, fmt.Sprintf("%s: the schema names properties of a Go map", path))
		}
		if typ.Elem().Kind() == reflect.Interface {
			return // free-form, checked by Kubernetes' types (affinity, valueFrom)
		}
		values, _ := node["additionalProperties"].(map[string]any)
		s.compareGo(path+"/*", values, typ.Elem(), drift)
	case reflect.String:
		if typ == reflect.TypeFor[Quantity]() {
			want("string", "number")
		} else {
			want("string")
		}
	case reflect.Int32, reflect.Int64:
		want("integer")
	case reflect.Bool:
		want("boolean")
	case reflect.Float64:
		want("number")
	default:
		*drift = append(*drift, fmt.Sprintf("%s: no rule for Go type %s", path, typ))
	}
}

// jsonFields returns the JSON names of a struct's fields, with embedded structs inline.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Anonymous {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = f.Type
		}
	}
	return out
}

func (s schemaDoc) compareMessage(path string, node map[string]any, md protoreflect.MessageDescriptor, drift *[]string) {
	node = s.resolve(node)
	props, _ := node["properties"].(map[string]any)
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		p, ok := props[f.JSONName()]
		if !ok {
			*drift = append(*drift, fmt.Sprintf("%s/%s: in %s, not in the schema", path, f.JSONName(), md.FullName()))
			continue
		}
		s.compareField(path+"/"+f.JSONName(), p.(map[string]any), f, drift)
	}
	for name := range props {
		if fields.ByJSONName(name) == nil {
			*drift = append(*drift, fmt.Sprintf("%s/%s: in the schema, not in %s", path, name, md.FullName()))
		}
	}
	if node["additionalProperties"] != false {
		*drift = append(*drift, fmt.Sprintf("%s: the schema must refuse unknown fields, as protojson does", path))
	}
}

func (s schemaDoc) compareField(path string, node map[string]any, f protoreflect.FieldDescriptor, drift *[]string) {
	node = s.resolve(node)
	types := schemaTypes(node)
	check := func(want string) {
		if !slices.Contains(types, want) {
			*drift = append(*drift, fmt.Sprintf("%s: the schema says %v, the message field is %s", path, types, f.Kind()))
		}
	}
	switch {
	case f.IsMap():
		check("object")
		values, _ := node["additionalProperties"].(map[string]any)
		s.compareScalar(path+"/*", values, f.MapValue(), drift)
	case f.IsList():
		check("array")
		items, _ := node["items"].(map[string]any)
		s.compareScalar(path+"/0", items, f, drift)
	default:
		s.compareScalar(path, node, f, drift)
	}
}

func (s schemaDoc) compareScalar(path string, node map[string]any, f protoreflect.FieldDescriptor, drift *[]string) {
	node = s.resolve(node)
	types := schemaTypes(node)
	var want string
	switch f.Kind() {
	case protoreflect.MessageKind:
		s.compareMessage(path, node, f.Message(), drift)
		return
	case protoreflect.StringKind:
		want = "string"
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind:
		want = "integer"
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		want = "number"
	case protoreflect.BoolKind:
		want = "boolean"
	default:
		*drift = append(*drift, fmt.Sprintf("%s: no rule for field kind %s", path, f.Kind()))
		return
	}
	if !slices.Contains(types, want) {
		*drift = append(*drift, fmt.Sprintf("%s: the schema says %v, the message field is %s", path, types, f.Kind()))
	}
}
