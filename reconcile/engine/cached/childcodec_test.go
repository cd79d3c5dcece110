package cached

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/evalsi"
)

// FuzzChildDecodersAgainstTyped is differential against apimachinery: it builds a typed
// Deployment from the fuzzed fields, has apimachinery encode it as the API server would (its
// protobuf serializer and its JSON), decodes each with the engine's hand-written decoders, and
// wants from both exactly the typed object's values of what a Child keeps. A bug the two
// decoders share (a field number, a JSON name) fails here, where comparing them with each other
// would not.
func FuzzChildDecodersAgainstTyped(f *testing.F) {
	f.Add("judge-evaluator", "team-a", "12345", int64(3), "h1", "Evaluator", "judge", int32(2), int64(2), int64(1), true, `pods "x" is forbidden: exceeded quota`, false)
	f.Add("", "", "", int64(0), "", "", "", int32(0), int64(0), int64(0), false, "", true)
	f.Add("a\x00b", "ns\xff", "-1", int64(1<<40+7), "é", "K", "n", int32(-1), int64(1<<40), int64(-3), true, "", true)
	f.Fuzz(func(t *testing.T, name, namespace, rv string, generation int64, hash, ownerKind, ownerName string,
		replicas int32, ready, available int64, refused bool, message string, deleting bool) {
		d := &appsv1.Deployment{
			TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: namespace, ResourceVersion: rv, Generation: generation,
				UID:         "0b7e6a3c-9d1f-4e2a-8c5b-7f3e2d1c0b9a",
				Annotations: map[string]string{evalsi.AnnotationSpecHash: hash, "unrelated": name},
				OwnerReferences: []metav1.OwnerReference{
					{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", UID: "11111111-2222-4333-8444-555555555555"},
					{APIVersion: "evals.si/v1alpha1", Kind: ownerKind, Name: ownerName, UID: "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", Controller: new(true)},
				},
			},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas},
			Status: appsv1.DeploymentStatus{ObservedGeneration: generation, Replicas: int32(ready), ReadyReplicas: int32(ready),
				UpdatedReplicas: int32(available), AvailableReplicas: int32(available)},
		}
		if deleting {
			now := metav1.Unix(1800000000, 0)
			d.DeletionTimestamp = &now
		}
		status := corev1.ConditionFalse
		if refused {
			status = corev1.ConditionTrue
		}
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: status, Message: message}}

		wantReplicas := int64(replicas)
		want := map[string]any{
			"name": name, "namespace": namespace, "resourceVersion": rv, "generation": generation,
			"uid": types.UID("0b7e6a3c-9d1f-4e2a-8c5b-7f3e2d1c0b9a"), "deleting": deleting,
			"SpecHash": hash, "controller": ControllerRef{APIVersion: "evals.si/v1alpha1", Kind: ownerKind, Name: ownerName, UID: "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"},
			"replicas": &wantReplicas,
			"status": rolloutCounts{ObservedGeneration: generation, Replicas: int64(int32(ready)), ReadyReplicas: int64(int32(ready)),
				UpdatedReplicas: int64(int32(available)), AvailableReplicas: int64(int32(available)), PodsRefused: map[bool]string{true: message}[refused]},
		}
		asJSON, err := json.Marshal(d)
		if err != nil {
			t.Skip("not JSON:", err) // invalid UTF-8 is replaced by encoding/json, not refused
		}
		for codec, raw := range map[string][]byte{"protobuf": protobufOf(t, d), "json": asJSON} {
			c, err := DecodeServedChild(raw)
			if err != nil {
				t.Fatalf("%s: decoding what apimachinery encoded: %v", codec, err)
			}
			got := map[string]any{
				"name": c.GetName(), "namespace": c.GetNamespace(), "resourceVersion": c.GetResourceVersion(), "generation": c.GetGeneration(),
				"uid": c.GetUID(), "deleting": c.GetDeletionTimestamp() != nil, "SpecHash": c.SpecHash, "controller": ControllerOf(c),
				"replicas": c.deployment.replicas, "status": c.deployment.status,
			}
			want := maps.Clone(want)
			if codec == "json" {
				// encoding/json writes invalid UTF-8 as U+FFFD: what the typed object says through
				// JSON is what apimachinery's own JSON decoding reads back.
				var back appsv1.Deployment
				if err := json.Unmarshal(asJSON, &back); err != nil {
					t.Fatal(err)
				}
				want["name"], want["namespace"], want["resourceVersion"], want["SpecHash"] = back.Name, back.Namespace, back.ResourceVersion, back.Annotations[evalsi.AnnotationSpecHash]
				want["controller"] = ControllerRef{APIVersion: "evals.si/v1alpha1", Kind: back.OwnerReferences[1].Kind, Name: back.OwnerReferences[1].Name, UID: back.OwnerReferences[1].UID}
				if refused {
					s := want["status"].(rolloutCounts)
					s.PodsRefused = back.Status.Conditions[0].Message
					want["status"] = s
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: the Child decoded from apimachinery's encoding differs from the typed object (-typed +child):\n%s", codec, diff)
			}
		}
	})
}
