package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"evals.si/operator/evalsi"
	"evals.si/operator/unstructuredjson"
)

// Result is what rendering one evals.si object gives.
type Result struct {
	// Objects are the children to apply, in a fixed order, each with its spec hash annotation.
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
	if err != nil {
		return r, err
	}
	for _, o := range r.Objects {
		if err := stampHash(o); err != nil {
			return r, err
		}
	}
	return r, nil
}

// stampHash sets evalsi.AnnotationSpecHash to a hash of the object without that annotation.
func stampHash(obj *unstructured.Unstructured) error {
	data, err := unstructuredjson.Marshal(obj.Object)
	if err != nil {
		return fmt.Errorf("hashing %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[evalsi.AnnotationSpecHash] = hex.EncodeToString(sum[:8])
	obj.SetAnnotations(ann)
	return nil
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
