package render

import (
	"net/url"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/schemas"
	"evals.si/operator/unstructuredjson"
)

// The kinds reconciled through evalsid have no children to render: their spec is the API
// message as JSON. These functions decode it as the reconcilers send it, after the same schema,
// and apply the rules across fields that the schema cannot say.

// RunSpec decodes and checks an EvalRun's spec, the RunSpec message.
func RunSpec(obj *unstructured.Unstructured) (*v1.RunSpec, error) {
	spec := &v1.RunSpec{}
	if err := decodeMessage(obj, spec); err != nil {
		return nil, err
	}
	var ps problems
	if (spec.Suite == "") == (spec.Dataset == "") {
		ps.add(specPointer, "set either suite or dataset")
	}
	t, tp := spec.GetTarget(), specPointer.at("target")
	if (t.GetEndpoint() == nil) == (t.GetCheckpointServer() == "") {
		ps.add(tp, "set either endpoint or checkpointServer")
	}
	if t.GetApiKeyEnv() != "" && t.GetCheckpointServer() == "" {
		ps.add(tp.at("apiKeyEnv"), "names the key of a checkpointServer target; an endpoint target names it in endpoint.apiKeyEnv")
	}
	if e := t.GetEndpoint(); e != nil {
		checkURLHoldsNoSecret(tp.at("endpoint").at("url"), e.Url, &ps)
	}
	checkUnique(specPointer.at("evaluators"), "evaluator", spec.Evaluators, &ps)
	return spec, ps.err()
}

// PolicySpec decodes and checks an OnlineEvalPolicy's spec, the PolicySpec message.
func PolicySpec(obj *unstructured.Unstructured) (*v1.PolicySpec, error) {
	spec := &v1.PolicySpec{}
	if err := decodeMessage(obj, spec); err != nil {
		return nil, err
	}
	var ps problems
	checkUnique(specPointer.at("evaluators"), "evaluator", spec.Evaluators, &ps)
	for i, a := range spec.Alerts {
		if !slices.Contains(spec.Evaluators, a.Evaluator) {
			ps.add(specPointer.at("alerts").index(i).at("evaluator"), "%q is not one of the policy's evaluators (%s)", a.Evaluator, strings.Join(spec.Evaluators, ", "))
		}
	}
	return spec, ps.err()
}

// TraceSourceSpec decodes and checks a TraceSource's spec, the TraceSourceSpec message.
func TraceSourceSpec(obj *unstructured.Unstructured) (*v1.TraceSourceSpec, error) {
	spec := &v1.TraceSourceSpec{}
	if err := decodeMessage(obj, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// decodeMessage checks obj's spec against its kind's schema, then decodes it into msg as
// protojson does (which refuses unknown fields).
func decodeMessage(obj *unstructured.Unstructured, msg proto.Message) error {
	if err := schemas.Validate(obj); err != nil {
		return err
	}
	data, err := unstructuredjson.Marshal(obj.Object["spec"])
	if err == nil {
		err = protojson.Unmarshal(data, msg)
	}
	if err != nil {
		return schemas.Errors{{Pointer: string(specPointer), Message: err.Error()}}
	}
	return nil
}

// secretQuery are query parameter names that carry a credential.
var secretQuery = []string{"key", "token", "secret", "password", "signature", "auth", "credential"}

// checkURLHoldsNoSecret refuses a URL with credentials in it: user information, or a query
// parameter that names a key or token. A key reaches the workers from an environment variable.
func checkURLHoldsNoSecret(p pointer, raw string, ps *problems) {
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	if u.User != nil {
		ps.add(p, "must not hold credentials: put the key in an environment variable of the workers and name it in apiKeyEnv")
		return
	}
	for name := range u.Query() {
		lower := strings.ToLower(name)
		for _, s := range secretQuery {
			if strings.Contains(lower, s) {
				ps.add(p, "must not hold a credential in its query (%s): put the key in an environment variable of the workers and name it in apiKeyEnv", name)
				return
			}
		}
	}
}

// checkUnique refuses a list that names the same thing twice.
func checkUnique(p pointer, what string, list []string, ps *problems) {
	seen := map[string]bool{}
	for i, v := range list {
		if seen[v] {
			ps.add(p.index(i), "%s %q is listed twice", what, v)
		}
		seen[v] = true
	}
}
