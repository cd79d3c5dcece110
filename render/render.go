package render

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"evals.si/operator/evalsi"
)

// Result is what rendering one evals.si object gives.
type Result struct {
	// Objects are the children to apply, in a fixed order, bare: engine.StampChild makes each the
	// owner's child (its labels, owner reference and spec hash).
	Objects []*unstructured.Unstructured
	// Pool describes an Evaluator's or SandboxClass's pool.
	Pool Pool
	// Served describes a CheckpointServer.
	Served Served
}

// Object renders any evals.si object. Kinds reconciled through evalsid (EvalRun,
// OnlineEvalPolicy, TraceSource) have no Kubernetes children: their spec is decoded and checked
// as their reconcilers do, and they render to nothing. A spec that cannot be rendered is
// schemas.Errors naming each field; any other error is the operator's configuration.
func Object(obj *unstructured.Unstructured, opts Options) (Result, error) {
	var r Result
	if err := checkIdentity(obj); err != nil {
		return r, err
	}
	if obj.GetNamespace() != "" {
		if _, err := Project(obj, opts); err != nil {
			return r, err
		}
	}
	err := renderers[obj.GetKind()](obj, opts, &r)
	return r, err
}

// renderers render each evals.si kind into r (TestEveryKindRenders holds them to evalsi.Kinds).
var renderers = map[string]func(obj *unstructured.Unstructured, opts Options, r *Result) error{
	evalsi.EvaluatorKind.Kind: func(obj *unstructured.Unstructured, opts Options, r *Result) (err error) {
		r.Objects, r.Pool, err = Evaluator(obj, opts)
		return err
	},
	evalsi.SandboxClassKind.Kind: func(obj *unstructured.Unstructured, opts Options, r *Result) (err error) {
		r.Objects, r.Pool, err = SandboxClass(obj, opts)
		return err
	},
	evalsi.CheckpointServerKind.Kind: func(obj *unstructured.Unstructured, opts Options, r *Result) (err error) {
		r.Objects, r.Served, err = CheckpointServer(obj, opts)
		return err
	},
	evalsi.EvalRunKind.Kind: func(obj *unstructured.Unstructured, _ Options, _ *Result) error {
		_, err := RunSpec(obj)
		return err
	},
	evalsi.OnlineEvalPolicyKind.Kind: func(obj *unstructured.Unstructured, _ Options, _ *Result) error {
		_, err := PolicySpec(obj)
		return err
	},
	evalsi.TraceSourceKind.Kind: func(obj *unstructured.Unstructured, _ Options, _ *Result) error {
		_, err := TraceSourceSpec(obj)
		return err
	},
}

// WriteYAML writes objs as a YAML stream, keys sorted, so the same objects always print the same.
func WriteYAML(w io.Writer, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", data); err != nil {
			return err
		}
	}
	return nil
}
