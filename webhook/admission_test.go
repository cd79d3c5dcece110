package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/evalsi"
)

func raw(t *testing.T, obj map[string]any) runtime.RawExtension {
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

func evalRun(trials int, annotations map[string]any, deleting bool) map[string]any {
	meta := map[string]any{"name": "r", "namespace": "team-a"}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	if deleting {
		meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
	}
	return map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun", "metadata": meta,
		"spec": map[string]any{"suite": "smoke", "target": map[string]any{"checkpointServer": "m"}, "trials": trials},
	}
}

func TestValidate(t *testing.T) {
	alice := map[string]any{evalsi.AnnotationCreatedBy: "alice"}
	for name, tc := range map[string]struct {
		op       admissionv1.Operation
		old, obj map[string]any
		denied   string
	}{
		"valid create":                 {admissionv1.Create, nil, evalRun(1, alice, false), ""},
		"invalid create":               {admissionv1.Create, nil, evalRun(0, alice, false), "/spec/trials: must be >= 1"},
		"creator set by someone else":  {admissionv1.Create, nil, evalRun(1, map[string]any{evalsi.AnnotationCreatedBy: "mallory"}, false), "written by admission"},
		"spec changed":                 {admissionv1.Update, evalRun(1, alice, false), evalRun(2, alice, false), "spec is immutable: create a new EvalRun"},
		"labels only":                  {admissionv1.Update, evalRun(1, alice, false), evalRun(1, alice, false), ""},
		"creator changed":              {admissionv1.Update, evalRun(1, alice, false), evalRun(1, map[string]any{evalsi.AnnotationCreatedBy: "bob"}, false), "cannot be changed or removed"},
		"creator removed":              {admissionv1.Update, evalRun(1, alice, false), evalRun(1, nil, false), "cannot be changed or removed"},
		"finalizer removal on delete":  {admissionv1.Update, evalRun(0, alice, true), evalRun(0, alice, true), ""},
		"delete is not validated here": {admissionv1.Delete, nil, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			req := &admissionv1.AdmissionRequest{UID: "u", Operation: tc.op, UserInfo: authenticationv1.UserInfo{Username: "alice"}}
			if tc.obj != nil {
				req.Object = raw(t, tc.obj)
			}
			if tc.old != nil {
				req.OldObject = raw(t, tc.old)
			}
			resp := Validator(Validation{})(context.Background(), req)
			if tc.denied == "" {
				if !resp.Allowed {
					t.Fatalf("denied: %s", resp.Result.Message)
				}
				return
			}
			if resp.Allowed || !strings.Contains(resp.Result.Message, tc.denied) {
				t.Fatalf("allowed=%v %v, want denied with %q", resp.Allowed, resp.Result, tc.denied)
			}
		})
	}
}

func TestMutateSetsCreator(t *testing.T) {
	for name, annotations := range map[string]map[string]any{
		"no annotations":       nil,
		"a forged creator":     {evalsi.AnnotationCreatedBy: "mallory"},
		"unrelated annotation": {"team": "a"},
	} {
		t.Run(name, func(t *testing.T) {
			resp := Mutate(context.Background(), &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create,
				Object: raw(t, evalRun(1, annotations, false)), UserInfo: authenticationv1.UserInfo{Username: "team-a-user"}})
			if !resp.Allowed || resp.PatchType == nil {
				t.Fatalf("response %+v", resp)
			}
			var patch []map[string]any
			if err := json.Unmarshal(resp.Patch, &patch); err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(patch)
			if !strings.Contains(string(data), `"team-a-user"`) || !strings.Contains(string(data), `"op":"add"`) {
				t.Errorf("patch %s does not set the creator", data)
			}
		})
	}
}
