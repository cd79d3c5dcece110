package webhook

import (
	"context"
	"fmt"
	"reflect"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
	"evals.si/operator/render"
	"evals.si/operator/schemas"
)

// Access holds a workload object to what whoever writes it may do: the operator renders its pods
// with its own rights, so without this check an Evaluator or CheckpointServer would give its
// writer the use of any Secret, ConfigMap, claim or service account of the namespace, which RBAC
// may deny them (evalsi-tenant-access grants none).
//   - A service account an Evaluator names must carry evalsi.LabelPoolServiceAccount=true, the
//     consent of someone who may write ServiceAccounts in the namespace (render refuses the
//     platform's own accounts outright).
//   - Every Secret, ConfigMap and PersistentVolumeClaim the spec references must be one the
//     requesting user may get themselves (a SubjectAccessReview as the request's user).
//
// It checks creates, and updates that change the spec: an update of metadata alone (a label, a
// finalizer, the garbage collector's) adds no reference.
type Access struct {
	// Kube reads ServiceAccounts and creates SubjectAccessReviews.
	Kube kubernetes.Interface
}

// check returns the references of obj that the request's user may not use.
func (a *Access) check(ctx context.Context, req *admissionv1.AdmissionRequest, obj *unstructured.Unstructured) (schemas.Errors, error) {
	if req.Operation == admissionv1.Update {
		old, err := decode(req.OldObject.Raw)
		if err != nil {
			return nil, err
		}
		if reflect.DeepEqual(old.Object["spec"], obj.Object["spec"]) {
			return nil, nil
		}
	}
	var problems schemas.Errors
	for _, ref := range render.References(obj) {
		msg, err := a.refusal(ctx, req, ref)
		if err != nil {
			return nil, fmt.Errorf("checking %s: %w", ref.Pointer, err)
		}
		if msg != "" {
			problems = append(problems, schemas.FieldError{Pointer: ref.Pointer, Message: msg})
		}
	}
	return problems, nil
}

// refusal says why the request's user may not use ref, or "".
func (a *Access) refusal(ctx context.Context, req *admissionv1.AdmissionRequest, ref render.Reference) (string, error) {
	if ref.Resource == "serviceaccounts" {
		sa, err := a.Kube.CoreV1().ServiceAccounts(req.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("service account %s does not exist in namespace %s", ref.Name, req.Namespace), nil
		}
		if err != nil {
			return "", err
		}
		if sa.Labels[evalsi.LabelPoolServiceAccount] != "true" {
			return fmt.Sprintf("service account %s is not open to pools: a namespace administrator labels it %s=true to let Evaluators run as it",
				ref.Name, evalsi.LabelPoolServiceAccount), nil
		}
		return "", nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range req.UserInfo.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	review, err := a.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: req.UserInfo.Username, Groups: req.UserInfo.Groups, UID: req.UserInfo.UID, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: req.Namespace, Verb: "get", Resource: ref.Resource, Name: ref.Name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if !review.Status.Allowed {
		return fmt.Sprintf("%s may not get %s %s in namespace %s, so its pods may not read it either", req.UserInfo.Username, ref.Resource, ref.Name, req.Namespace), nil
	}
	return "", nil
}
