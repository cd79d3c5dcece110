package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
	"evals.si/operator/unstructuredjson"
)

// DryRun has validation apply the children a workload object renders to with dryRun=All, so
// that what only the API server knows (cluster policies such as a registry allow-list, quotas,
// LimitRanges, admission plugins) refuses the object at admission instead of leaving it Stalled.
// It needs permission to create the children; it only ever sends dry runs.
type DryRun struct {
	Client dynamic.Interface
	// Render are the operator's rendering options (images, sandbox namespace, evalsid URL).
	Render render.Options
	// Timeout bounds the dry runs of one admission request. When it passes, or a dry run fails
	// for any reason but a refusal (422), the object is admitted with a warning: the operator
	// applies the same children and reports a refusal as Stalled.
	Timeout time.Duration
}

// check dry-runs obj's children. It returns the refusal to deny with ("" when none) and warnings
// for dry runs that could not say.
func (d *DryRun) check(ctx context.Context, obj *unstructured.Unstructured) (refusal string, warnings []string) {
	res, err := render.Object(obj, d.Render)
	if err != nil || len(res.Objects) == 0 {
		return "", nil // validation already answered; nothing to dry-run
	}
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	for _, child := range res.Objects {
		gvr, ok := evalsi.ChildResources[child.GetKind()]
		if !ok {
			continue
		}
		if err := engine.StampChild(obj, child); err != nil {
			warnings = append(warnings, fmt.Sprintf("could not dry-run the %s %s: %v", child.GetKind(), child.GetName(), err))
			continue
		}
		err := dryRunApply(ctx, d.Client, gvr, child, evalsi.ChildFieldValidation)
		switch {
		case err == nil:
		case apierrors.IsInvalid(err):
			return fmt.Sprintf("the API server would refuse its %s %s: %v%s", child.GetKind(), child.GetName(), err,
				d.nameHeld(ctx, gvr, child, obj.GetKind())), nil
		case apierrors.IsNotFound(err) && child.GetKind() == "ScaledObject":
			// KEDA is not installed: the operator runs fixed replicas instead.
		default:
			warnings = append(warnings, fmt.Sprintf("could not dry-run the %s %s, so only the operator will find out whether the API server takes it: %s",
				child.GetKind(), child.GetName(), strings.TrimSpace(err.Error())))
		}
	}
	return "", warnings
}

// nameHeld says, after the apply of child was refused, whether that is because an object of its
// name exists: a team's own Deployment named like an Evaluator's makes the apply fail on its
// immutable selector, which by itself does not say that the name is taken. The webhook may not
// read those objects, so it asks with a dry-run create, which only an existing name refuses as
// AlreadyExists. It returns "" when no object holds the name or the create cannot say.
func (d *DryRun) nameHeld(ctx context.Context, gvr schema.GroupVersionResource, child *unstructured.Unstructured, ownerKind string) string {
	_, err := d.Client.Resource(gvr).Namespace(child.GetNamespace()).Create(ctx, child, metav1.CreateOptions{
		FieldManager: evalsi.FieldManager, DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsAlreadyExists(err) {
		return ""
	}
	return fmt.Sprintf(" (a %s named %s already exists in %s, and the operator takes over only objects it made: "+
		"rename or remove that %s, or give this %s another name)",
		child.GetKind(), child.GetName(), child.GetNamespace(), child.GetKind(), ownerKind)
}

// dryRunApply dry-runs the apply of child as the operator makes it, asking for the given
// fieldValidation (the operator's evalsi.ChildFieldValidation; a test asks for Strict).
func dryRunApply(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, child *unstructured.Unstructured, validation string) error {
	body, err := unstructuredjson.Marshal(child.Object)
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", child.GetKind(), child.GetName(), err)
	}
	force := true
	_, err = client.Resource(gvr).Namespace(child.GetNamespace()).Patch(ctx, child.GetName(), types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: evalsi.FieldManager, Force: &force, FieldValidation: validation, DryRun: []string{metav1.DryRunAll}})
	return err
}

// dryRunObject is obj as its children are rendered at admission: with a uid (a create has none
// yet) so that the children's ownerReferences are complete.
func dryRunObject(req *admissionv1.AdmissionRequest, obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := obj.DeepCopy()
	if out.GetUID() == "" {
		out.SetUID(types.UID(req.UID))
	}
	if out.GetNamespace() == "" {
		out.SetNamespace(req.Namespace)
	}
	return out
}
