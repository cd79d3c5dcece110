package webhook

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"

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
//
// A review's references are asked at once, and their answers kept briefly (Answers), so that the
// webhook serves reviews with references at the pace the API server sends them.
type Access struct {
	// Kube reads ServiceAccounts and creates SubjectAccessReviews.
	Kube kubernetes.Interface
	// Answers keeps the answers.
	Answers *Answers
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
	refs := render.References(obj)
	refusals, errs := make([]string, len(refs)), make([]error, len(refs))
	var unknown []int
	for i, ref := range refs {
		var kept bool
		if refusals[i], kept = a.Answers.kept(questionOf(req, ref)); !kept {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		offSlot(ctx, func() {
			var wg sync.WaitGroup
			for _, i := range unknown {
				wg.Go(func() {
					refusals[i], errs[i] = a.Answers.refusal(ctx, questionOf(req, refs[i]),
						func(ctx context.Context) (string, error) { return a.ask(ctx, req, refs[i]) })
				})
			}
			wg.Wait()
		})
	}
	var problems schemas.Errors
	for i, ref := range refs {
		if errs[i] != nil {
			return nil, fmt.Errorf("checking %s: %w", ref.Pointer, errs[i])
		}
		if refusals[i] != "" {
			problems = append(problems, schemas.FieldError{Pointer: ref.Pointer, Message: refusals[i]})
		}
	}
	return problems, nil
}

// questionOf is the whole of what ref's answer depends on: a service account's namespace and name
// (its label is the answer, whoever asks), or the SubjectAccessReview's user and attributes.
func questionOf(req *admissionv1.AdmissionRequest, ref render.Reference) string {
	if ref.Resource == "serviceaccounts" {
		return strings.Join([]string{ref.Resource, req.Namespace, ref.Name}, "\x00")
	}
	u := req.UserInfo
	// %q quotes every string, and prints a map's keys sorted.
	return fmt.Sprintf("%q %q %q %q %q %q %q", ref.Resource, req.Namespace, ref.Name, u.Username, u.UID, u.Groups, u.Extra)
}

// accessReview asks whether the request's user may get ref.
func accessReview(req *admissionv1.AdmissionRequest, ref render.Reference) *authorizationv1.SubjectAccessReview {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range req.UserInfo.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	return &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: req.UserInfo.Username, Groups: req.UserInfo.Groups, UID: req.UserInfo.UID, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: req.Namespace, Verb: "get", Resource: ref.Resource, Name: ref.Name,
			},
		},
	}
}

// ask asks the API server why the request's user may not use ref, or "".
func (a *Access) ask(ctx context.Context, req *admissionv1.AdmissionRequest, ref render.Reference) (string, error) {
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
	review, err := a.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, accessReview(req, ref), metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if !review.Status.Allowed {
		return fmt.Sprintf("%s may not get %s %s in namespace %s, so its pods may not read it either", req.UserInfo.Username, ref.Resource, ref.Name, req.Namespace), nil
	}
	return "", nil
}
