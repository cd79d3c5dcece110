// Package schemas holds the JSON schemas of every evalsi kind's spec (the CLI's rules) and the
// validator built on them, which the admission webhook, the `validate` command and the
// reconcilers share.
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
)

//go:embed *.json
var files embed.FS

const base = "https://evals.si/schemas/"

// FieldError is one problem with an object: the JSON pointer of the field and a sentence.
type FieldError struct {
	Pointer string
	Message string
}

func (e FieldError) String() string { return e.Pointer + ": " + e.Message }

// Errors are the problems of one object, in pointer order.
type Errors []FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return strings.Join(parts, "; ")
}

// compiled holds every kind's compiled schema, compiled on first use.
var compiled = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	c.Formats["duration"] = isDuration
	c.Formats["quantity"] = isQuantity
	c.Formats["model"] = isModel
	c.Formats["http-url"] = isHTTPURL
	entries, err := files.ReadDir(".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		data, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		if err := c.AddResource(base+e.Name(), bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, k := range evalsi.Kinds {
		s, err := c.Compile(base + k.SchemaFile())
		if err != nil {
			return nil, fmt.Errorf("compiling %s: %w", k.SchemaFile(), err)
		}
		out[k.Kind] = s
	}
	return out, nil
})

// Source returns the JSON schema of kind's spec as written, and the shared definitions it refers
// to (common.json), for tests that compare the schema with the Go types that decode the spec.
func Source(kind string) (schema, common []byte, err error) {
	k, ok := evalsi.KindNamed(kind)
	if !ok {
		return nil, nil, fmt.Errorf("%q is not an evals.si kind", kind)
	}
	if schema, err = files.ReadFile(k.SchemaFile()); err != nil {
		return nil, nil, err
	}
	common, err = files.ReadFile("common.json")
	return schema, common, err
}

// Validate checks the structure of an evalsi object's spec against its kind's schema: fields,
// types, formats and ranges. It returns nil or Errors with pointers such as
// /spec/autoscaling/minReplicas. Rules across fields, and Kubernetes' own rules for what is
// copied into pods, are render's: render.Validate runs this first, then those.
func Validate(obj *unstructured.Unstructured) error {
	schemas, err := compiled()
	if err != nil {
		return err
	}
	kind := obj.GetKind()
	s, ok := schemas[kind]
	if !ok {
		return Errors{{Pointer: "/kind", Message: fmt.Sprintf("%q is not an evals.si kind", kind)}}
	}
	var errs Errors
	spec, found := obj.Object["spec"]
	if !found {
		return append(errs, FieldError{"/spec", "is required"})
	}
	// The validator wants JSON values: numbers as float64 or json.Number, not int64.
	data, err := json.Marshal(spec)
	if err != nil {
		return append(errs, FieldError{"/spec", err.Error()})
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return append(errs, FieldError{"/spec", err.Error()})
	}
	if err := s.Validate(v); err != nil {
		ve, ok := err.(*jsonschema.ValidationError)
		if !ok {
			return append(errs, FieldError{"/spec", err.Error()})
		}
		errs = append(errs, explain(ve, v)...)
	}
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Pointer < errs[j].Pointer })
	return dedupe(errs)
}

func dedupe(errs Errors) Errors {
	var out Errors
	seen := map[FieldError]bool{}
	for _, e := range errs {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

var (
	reMissing    = regexp.MustCompile(`^missing properties?: (.*)$`)
	reAdditional = regexp.MustCompile(`^additionalProperties (.*) not allowed$`)
	reQuoted     = regexp.MustCompile(`'([^']*)'`)
	reFormat     = regexp.MustCompile(`^'(.*)' is not valid '([^']*)'$`)
	rePattern    = regexp.MustCompile(`^does not match pattern '(.*)'$`)
)

// formatSentences say what each format wants.
var formatSentences = map[string]string{
	"duration": "is not a duration such as \"30s\", \"5m\" or \"1h\"",
	"quantity": "is not a quantity such as \"500m\", \"2\" or \"4Gi\"",
	"model":    "is neither a path under /checkpoints/ nor a model id such as \"org/model\"",
	"http-url": "is not an http or https URL",
}

// patternSentences say what each pattern of common.json wants.
var patternSentences = map[string]string{
	"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$":                               "must be a DNS label: lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit",
	`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`: "must be a DNS subdomain: DNS labels joined by '.', such as \"run-17.checkpoints\"",
	"^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$":                                    "is not an image reference such as \"registry.example/team/image:1.0\"",
	"^[A-Za-z_][A-Za-z0-9_]*$":                                           "must be an environment variable name: letters, digits and '_', not starting with a digit",
}

// explain turns the validator's error tree into one sentence per failed leaf.
func explain(ve *jsonschema.ValidationError, instance any) Errors {
	if len(ve.Causes) > 0 {
		var out Errors
		for _, c := range ve.Causes {
			out = append(out, explain(c, instance)...)
		}
		return out
	}
	ptr := "/spec" + ve.InstanceLocation
	msg := ve.Message
	if m := reMissing.FindStringSubmatch(msg); m != nil {
		var out Errors
		for _, q := range reQuoted.FindAllStringSubmatch(m[1], -1) {
			out = append(out, FieldError{ptr + "/" + q[1], "is required"})
		}
		return out
	}
	if m := reAdditional.FindStringSubmatch(msg); m != nil {
		// The message quotes the names in map order, and a name may itself hold quotes and commas:
		// so ask which of the object's own keys it lists as a whole item.
		obj, _ := instanceAt(instance, ve.InstanceLocation).(map[string]any)
		var out Errors
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if listsName(m[1], quoteName(k)) {
				out = append(out, FieldError{ptr + "/" + EscapePointer(k), "is not a known field"})
			}
		}
		if len(out) == 0 {
			out = Errors{{ptr, msg}}
		}
		return out
	}
	if m := reFormat.FindStringSubmatch(msg); m != nil {
		if s, ok := formatSentences[m[2]]; ok {
			return Errors{{ptr, strconv.Quote(m[1]) + " " + s}}
		}
	}
	if m := rePattern.FindStringSubmatch(msg); m != nil {
		if s, ok := patternSentences[m[1]]; ok {
			return Errors{{ptr, s}}
		}
	}
	return Errors{{ptr, msg}}
}

// quoteName quotes a property name the way the validator's messages do, including its flaw:
// a name ending in a backslash loses that backslash's escape.
func quoteName(name string) string {
	q := strings.ReplaceAll(strconv.Quote(name), `\"`, `"`)
	return "'" + strings.ReplaceAll(q[1:len(q)-1], "'", `\'`) + "'"
}

// listsName reports whether quoted is one whole item of a list joined by ", ". Inside a quoted
// name every quote but a lost last one is escaped, so "', '" only ever falls between items.
func listsName(list, quoted string) bool {
	for from := 0; ; {
		i := strings.Index(list[from:], quoted)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(quoted)
		if (i == 0 || strings.HasSuffix(list[:i], ", ")) && (end == len(list) || strings.HasPrefix(list[end:], ", ")) {
			return true
		}
		from = i + 1
	}
}

// instanceAt returns the value at JSON pointer ptr in v, or nil.
func instanceAt(v any, ptr string) any {
	if ptr == "" {
		return v
	}
	for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// EscapePointer escapes a name as one token of a JSON pointer (RFC 6901: ~ as ~0, / as ~1).
func EscapePointer(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

func isDuration(v any) bool {
	s, ok := v.(string)
	if !ok {
		return true
	}
	d, err := time.ParseDuration(s)
	return err == nil && d > 0
}

func isQuantity(v any) bool {
	s, ok := v.(string)
	if !ok {
		return true
	}
	_, err := resource.ParseQuantity(s)
	return err == nil
}

var modelID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)?$`)

// isModel accepts a path under /checkpoints/ or a model id ("org/model").
func isModel(v any) bool {
	s, ok := v.(string)
	if !ok {
		return true
	}
	if strings.HasPrefix(s, "/checkpoints/") {
		return !strings.Contains(s, "/../") && !strings.HasSuffix(s, "/..")
	}
	return modelID.MatchString(s)
}

func isHTTPURL(v any) bool {
	s, ok := v.(string)
	if !ok {
		return true
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
