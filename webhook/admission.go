// Package webhook is the admission webhook of the evals.si kinds: validation with the schemas the
// CLI uses, EvalRun spec immutability, and the creator annotation that admission writes and no
// user can set or change.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/tenancy"
	"evals.si/operator/render"
	"evals.si/operator/schemas"
)

// Decider decides one admission request.
type Decider func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// Validation is what validating admission reads besides the request; each part is optional.
type Validation struct {
	// Namespaces gives the namespaces' project bindings, so that an object naming a project its
	// namespace may not act in is refused; nil: bindings are never known. Until the cache has
	// synced, and for a namespace it has not seen yet, the object's label is taken as given: the
	// operator refuses it again (ProjectNotAllowed) and calls nothing, so admission only gives the
	// earlier, clearer answer.
	Namespaces *tenancy.Namespaces
	// Limits are the platform's limits specs are held to (the bindings are filled in from
	// Namespaces).
	Limits render.Limits
	// Access checks what a workload object's pods would use against the writer's own rights.
	Access *Access
	// DryRun dry-runs the children of workload objects that pass validation.
	DryRun *DryRun
}

// Validator decides validating admission requests with v.
func Validator(v Validation) Decider {
	return func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		limits := v.Limits
		limits.ProjectBindings = nil
		if v.Namespaces != nil {
			if bindings, ok := v.Namespaces.Bindings(req.Namespace); ok {
				limits.ProjectBindings = bindings
			}
		}
		resp := validate(req, limits)
		if !resp.Allowed || req.Operation == admissionv1.Delete {
			return resp
		}
		obj, err := decode(req.Object.Raw)
		if err != nil || obj.GetDeletionTimestamp() != nil {
			return resp
		}
		if v.Access != nil {
			problems, err := v.Access.check(ctx, req, obj)
			if err != nil {
				// Fail closed: a reference that cannot be checked is not admitted.
				return deny(req, http.StatusInternalServerError, metav1.StatusReasonInternalError,
					fmt.Sprintf("%s %s: cannot check what its pods would use: %v", obj.GetKind(), obj.GetName(), err))
			}
			if len(problems) > 0 {
				return deny(req, http.StatusForbidden, metav1.StatusReasonForbidden,
					fmt.Sprintf("%s %s is invalid: %v", obj.GetKind(), obj.GetName(), problems))
			}
		}
		if v.DryRun == nil {
			return resp
		}
		var refusal string
		var warnings []string
		// The dry runs wait on the API server (offSlot).
		offSlot(ctx, func() { refusal, warnings = v.DryRun.check(ctx, dryRunObject(req, obj)) })
		if refusal != "" {
			return deny(req, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
				fmt.Sprintf("%s %s is invalid: %s", obj.GetKind(), obj.GetName(), refusal))
		}
		resp.Warnings = warnings
		return resp
	}
}

// validate decides a validating admission request with the platform's limits and the namespaces'
// known project bindings.
func validate(req *admissionv1.AdmissionRequest, limits render.Limits) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allow(req)
	}
	obj, err := decode(req.Object.Raw)
	if err != nil {
		return deny(req, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("cannot decode the object: %v", err))
	}
	if req.Operation == admissionv1.Update {
		if obj.GetDeletionTimestamp() != nil {
			// An object on its way out: let its finalizers go whatever its spec.
			return allow(req)
		}
		old, err := decode(req.OldObject.Raw)
		if err != nil {
			return deny(req, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("cannot decode the old object: %v", err))
		}
		if msg := immutable(old, obj); msg != "" {
			return deny(req, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg)
		}
	} else if _, set := obj.GetAnnotations()[evalsi.AnnotationCreatedBy]; set && obj.GetAnnotations()[evalsi.AnnotationCreatedBy] != req.UserInfo.Username {
		// The mutating webhook writes the creator; a different value here means it did not run.
		return deny(req, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("metadata.annotations[%s] is written by admission and cannot be set", evalsi.AnnotationCreatedBy))
	}
	if err := render.Validate(obj, limits); err != nil {
		return deny(req, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("%s %s is invalid: %v", obj.GetKind(), obj.GetName(), err))
	}
	return allow(req)
}

// immutable returns why the update from old to obj is not allowed, or "".
func immutable(old, obj *unstructured.Unstructured) string {
	if old.GetAnnotations()[evalsi.AnnotationCreatedBy] != obj.GetAnnotations()[evalsi.AnnotationCreatedBy] {
		return fmt.Sprintf("metadata.annotations[%s] records who created the object and cannot be changed or removed", evalsi.AnnotationCreatedBy)
	}
	// Both sides come from JSON, so their numbers have the same Go type.
	if obj.GetKind() == "EvalRun" && !reflect.DeepEqual(old.Object["spec"], obj.Object["spec"]) {
		return "spec is immutable: create a new EvalRun"
	}
	return ""
}

// Mutate decides a mutating admission request: on create, the creator annotation is set to the
// authenticated user, replacing any value the client sent.
func Mutate(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create {
		return allow(req)
	}
	obj, err := decode(req.Object.Raw)
	if err != nil {
		return deny(req, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("cannot decode the object: %v", err))
	}
	var patch []map[string]any
	if obj.GetAnnotations() == nil {
		patch = []map[string]any{{"op": "add", "path": "/metadata/annotations", "value": map[string]string{evalsi.AnnotationCreatedBy: req.UserInfo.Username}}}
	} else {
		patch = []map[string]any{{"op": "add", "path": "/metadata/annotations/" + schemas.EscapePointer(evalsi.AnnotationCreatedBy), "value": req.UserInfo.Username}}
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return deny(req, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
	}
	resp := allow(req)
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = data, &pt
	return resp
}

func decode(raw []byte) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func allow(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
}

func deny(req *admissionv1.AdmissionRequest, code int32, reason metav1.StatusReason, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}}
}

// handler serves AdmissionReview v1 requests with decide.
func handler(decide Decider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "cannot decode the AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = decide(r.Context(), review.Request)
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(review)
	})
}
