package render

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
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
	var err error
	switch obj.GetKind() {
	case "Evaluator":
		r.Objects, r.Pool, err = Evaluator(obj, opts)
	case "SandboxClass":
		r.Objects, r.Pool, err = SandboxClass(obj, opts)
	case "CheckpointServer":
		r.Objects, r.Served, err = CheckpointServer(obj, opts)
	case "EvalRun":
		_, err = RunSpec(obj)
	case "OnlineEvalPolicy":
		_, err = PolicySpec(obj)
	case "TraceSource":
		_, err = TraceSourceSpec(obj)
	}
	return r, err
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
