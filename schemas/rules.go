package schemas

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// The x-rules keyword holds the cross-field rules that JSON Schema cannot say, as data in the
// schema: each rule names its fields by relative JSON pointer and carries the sentence a user
// reads when it fails.
//
//	lte, lt              fields[0] <= (<) fields[1], when both are set
//	exactlyOne           exactly one of the fields is set
//	atMostOne            at most one of the fields is set
//	requiresWhenPrefixed fields[1] is set when fields[0] is a string starting with prefix
var rulesMeta = jsonschema.MustCompileString("x-rules-meta.json", `{
	"properties": {
		"x-rules": {
			"type": "array",
			"items": {
				"type": "object",
				"required": ["rule", "fields", "message"],
				"properties": {
					"rule": {"enum": ["lte", "lt", "exactlyOne", "atMostOne", "requiresWhenPrefixed"]},
					"fields": {"type": "array", "items": {"type": "string", "pattern": "^/"}, "minItems": 2, "maxItems": 2},
					"message": {"type": "string"},
					"prefix": {"type": "string"}
				}
			}
		}
	}
}`)

// ruleSeparator separates the field (relative to the instance) from the sentence in the message
// of a failed rule; explain splits them again.
const ruleSeparator = "\x1f"

type rule struct {
	Rule    string   `json:"rule"`
	Fields  []string `json:"fields"`
	Message string   `json:"message"`
	Prefix  string   `json:"prefix"`
}

type rulesCompiler struct{}

func (rulesCompiler) Compile(_ jsonschema.CompilerContext, m map[string]any) (jsonschema.ExtSchema, error) {
	raw, ok := m["x-rules"]
	if !ok {
		return nil, nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var rs rules
	if err := json.Unmarshal(data, &rs); err != nil {
		return nil, fmt.Errorf("x-rules: %w", err)
	}
	return rs, nil
}

type rules []rule

// Validate checks every rule on an object instance.
func (rs rules) Validate(ctx jsonschema.ValidationContext, v any) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var failed []error
	for _, r := range rs {
		if field, ok := r.check(obj); !ok {
			failed = append(failed, ctx.Error("x-rules", "%s", field+ruleSeparator+r.Message))
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return failed[0]
	default:
		parent := ctx.Error("x-rules", "cross-field rules failed")
		return jsonschema.ValidationError{}.Group(parent, failed...)
	}
}

// check evaluates r on obj and returns the field to report when it fails ("" is the object).
func (r rule) check(obj map[string]any) (string, bool) {
	a, aSet := obj[strings.TrimPrefix(r.Fields[0], "/")]
	b, bSet := obj[strings.TrimPrefix(r.Fields[1], "/")]
	switch r.Rule {
	case "lte", "lt":
		x, xok := number(a)
		y, yok := number(b)
		if !aSet || !bSet || !xok || !yok {
			return "", true
		}
		return r.Fields[0], x < y || r.Rule == "lte" && x == y
	case "exactlyOne":
		return "", aSet != bSet
	case "atMostOne":
		return "", !(aSet && bSet)
	case "requiresWhenPrefixed":
		s, _ := a.(string)
		return r.Fields[1], bSet || !strings.HasPrefix(s, r.Prefix)
	}
	return "", true
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	}
	return 0, false
}
