package render

import (
	"maps"
	"slices"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"evals.si/operator/evalsi"
	"evals.si/operator/schemas"
)

// validationOptions stand in for the operator's settings when a spec is checked without an
// operator (admission, `validate`): every setting is given, so only the spec can fail.
var validationOptions = Options{
	DefaultImage:     "validate.invalid/platform",
	VLLMImage:        "validate.invalid/vllm",
	SandboxNamespace: "evalsi-sandbox",
	APIURL:           "https://evalsid.invalid",
	Autoscaling:      true,
}

// Validate checks an evals.si object as admission, the `validate` command and the reconcilers
// do: it is rendering without the output, so a spec that Validate accepts always renders, and
// one that rendering refuses is refused here with the same field, against the same limits. It
// returns nil or schemas.Errors with JSON pointers such as /spec/autoscaling/minReplicas.
func Validate(obj *unstructured.Unstructured, limits Limits) error {
	opts := validationOptions
	opts.Limits = limits
	_, err := Object(obj, opts)
	return err
}

// checkIdentity checks what every object's kind asks of its apiVersion and name: the served
// version, and names that the children's names and label values are built from.
func checkIdentity(obj *unstructured.Unstructured) error {
	var ps problems
	gvk := obj.GroupVersionKind()
	if gvk.Group != evalsi.Group || gvk.Version != evalsi.Version {
		ps.add("/apiVersion", "%q is not served: use %s/%s", obj.GetAPIVersion(), evalsi.Group, evalsi.Version)
		return ps.err()
	}
	checkMetadata(obj, &ps)
	name := obj.GetName()
	k, ok := evalsi.KindNamed(obj.GetKind())
	switch {
	case !ok:
		return schemas.Errors{{Pointer: "/kind", Message: "\"" + obj.GetKind() + "\" is not an evals.si kind"}}
	case k == evalsi.CheckpointServerKind:
		// The Service is <name>-vllm, a DNS-1035 label: a letter first, 63 characters at most.
		if errs := validation.IsDNS1035Label(name + "-vllm"); len(errs) > 0 {
			ps.add("/metadata/name", "must start with a letter and have at most 58 lowercase letters, digits and '-': the Service %s-vllm is a DNS-1035 label", name)
		}
	case k.Workload:
		// The name is a label value of every child and part of the Deployment's name.
		ps.addAll("/metadata/name", validation.IsDNS1123Label(name))
	default:
		ps.addAll("/metadata/name", validation.IsDNS1123Subdomain(name))
	}
	return ps.err()
}

// checkMetadata applies the API server's rules of every object's labels and annotations
// (apimachinery's validation), so that what validate and render accept the API server does too.
func checkMetadata(obj *unstructured.Unstructured, ps *problems) {
	labels := obj.GetLabels()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		at := pointer("/metadata/labels").at(k)
		ps.addAll(at, validation.IsQualifiedName(k))
		for _, msg := range validation.IsValidLabelValue(labels[k]) {
			ps.add(at, "%q: %s", labels[k], msg)
		}
	}
	annotations := obj.GetAnnotations()
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		ps.addAll(pointer("/metadata/annotations").at(k), validation.IsQualifiedName(strings.ToLower(k)))
	}
	if err := apivalidation.ValidateAnnotationsSize(annotations); err != nil {
		ps.add("/metadata/annotations", "%s", err.Error())
	}
	if v, ok := annotations[evalsi.AnnotationTTLAfterFinished]; ok {
		at := pointer("/metadata/annotations").at(evalsi.AnnotationTTLAfterFinished)
		if obj.GetKind() != evalsi.EvalRunKind.Kind {
			ps.add(at, "only an EvalRun expires after it finished")
		} else if _, _, err := evalsi.ParseTTL(v); err != nil {
			ps.add(at, "%s", err.Error())
		}
	}
}
