package reconcile

import (
	"bytes"
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
)

// servedDeploymentJSON is an Evaluator's pool Deployment as the API server serves it: managed
// fields of the operator's apply and of the controller's status writes, a pod template, a
// rollout's status.
const servedDeploymentJSON = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"judge-evaluator","namespace":"team-a",
"uid":"5c0e8e43-3c55-4a61-9c1e-2a3f3b1d8f10","resourceVersion":"123456","generation":2,"creationTimestamp":"2026-12-07T10:00:01Z",
"labels":{"app.kubernetes.io/name":"evaluator","app.kubernetes.io/instance":"judge","app.kubernetes.io/managed-by":"evalsi-operator"},
"annotations":{"evals.si/spec-hash":"9f2c1d7e","deployment.kubernetes.io/revision":"2"},
"ownerReferences":[{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","name":"judge","uid":"0b7e6a3c-9d1f-4e2a-8c5b-7f3e2d1c0b9a","controller":true,"blockOwnerDeletion":true}],
"managedFields":[{"manager":"evalsi-operator","operation":"Apply","apiVersion":"apps/v1","time":"2026-12-07T10:00:01Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{"f:evals.si/spec-hash":{}},"f:labels":{"f:app.kubernetes.io/instance":{},"f:app.kubernetes.io/managed-by":{},"f:app.kubernetes.io/name":{}},"f:ownerReferences":{"k:{\"uid\":\"0b7e6a3c-9d1f-4e2a-8c5b-7f3e2d1c0b9a\"}":{}}},"f:spec":{"f:replicas":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:app.kubernetes.io/instance":{},"f:app.kubernetes.io/name":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"evaluator\"}":{".":{},"f:args":{},"f:env":{},"f:image":{},"f:name":{},"f:resources":{}}}}}}}},
{"manager":"kube-controller-manager","operation":"Update","apiVersion":"apps/v1","time":"2026-12-07T10:00:09Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{"f:deployment.kubernetes.io/revision":{}}},"f:status":{"f:availableReplicas":{},"f:conditions":{},"f:observedGeneration":{},"f:readyReplicas":{},"f:replicas":{},"f:updatedReplicas":{}}},"subresource":"status"}]},
"spec":{"replicas":2,"selector":{"matchLabels":{"app.kubernetes.io/name":"evaluator","app.kubernetes.io/instance":"judge"}},
"template":{"metadata":{"labels":{"app.kubernetes.io/name":"evaluator","app.kubernetes.io/instance":"judge"}},
"spec":{"serviceAccountName":"judge-evaluator","containers":[{"name":"evaluator","image":"evalsi/platform:1.4.0","args":["--pool=judge","--judge-model=judge-small"],
"env":[{"name":"EVALSI_API_URL","value":"http://evalsid.evalsi.svc:8080"},{"name":"EVALSI_PROJECT","value":"team-a"},{"name":"EVALSI_EVALUATOR","value":"judge"}],
"resources":{"requests":{"cpu":"250m","memory":"512Mi"},"limits":{"memory":"1Gi"}}}]}}},
"status":{"observedGeneration":2,"replicas":2,"readyReplicas":2,"updatedReplicas":2,"availableReplicas":2,
"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"Deployment has minimum availability."},
{"type":"Progressing","status":"True","reason":"NewReplicaSetAvailable","message":"ReplicaSet \"judge-evaluator-7c9d\" has successfully progressed."}]}}`

// servedEvaluatorJSON is an Evaluator as a watch event carries it, with the managed fields of
// kubectl's client-side apply (and its copy of the object) and of the operator's status writes.
const servedEvaluatorJSON = `{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","metadata":{"name":"judge","namespace":"team-a",
"uid":"0b7e6a3c-9d1f-4e2a-8c5b-7f3e2d1c0b9a","resourceVersion":"123456","generation":3,"creationTimestamp":"2026-12-07T10:00:00Z",
"labels":{"app.kubernetes.io/part-of":"evals"},"annotations":{"evals.si/created-by":"alice@example.com",
"kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"evals.si/v1alpha1\",\"kind\":\"Evaluator\",\"metadata\":{\"name\":\"judge\",\"namespace\":\"team-a\"},\"spec\":{\"args\":[\"--judge-model=judge-small\"],\"autoscaling\":{\"maxReplicas\":10,\"minReplicas\":1}}}"},
"finalizers":["evals.si/pool"],
"managedFields":[{"manager":"kubectl-client-side-apply","operation":"Update","apiVersion":"evals.si/v1alpha1","time":"2026-12-07T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}}},"f:spec":{".":{},"f:args":{},"f:autoscaling":{".":{},"f:maxReplicas":{},"f:minReplicas":{}}}}},
{"manager":"evalsi-operator","operation":"Update","apiVersion":"evals.si/v1alpha1","time":"2026-12-07T10:00:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{".":{},"f:conditions":{},"f:observedGeneration":{},"f:readyReplicas":{},"f:replicas":{}}},"subresource":"status"}]},
"spec":{"args":["--judge-model=judge-small"],"sandboxClass":"landlock","resources":{"requests":{"cpu":"250m","memory":"512Mi"},"limits":{"memory":"1Gi"}},
"autoscaling":{"minReplicas":1,"maxReplicas":10,"targetQueueDepth":20,"pollingInterval":"15s","cooldownPeriod":"2m","fallback":{"replicas":2}}},
"status":{"observedGeneration":3,"replicas":1,"readyReplicas":1,"conditions":[{"type":"Ready","status":"True","reason":"Available","message":"the pool's current spec is rolled out","lastTransitionTime":"2026-12-07T10:00:05Z","observedGeneration":3}]}}`

// BenchmarkDecodersBesideApimachinery sets the engine's hand-written decoders (cached.Form, what
// its informers keep) beside what a client-go informer does with the same bytes: a child
// Deployment served as protobuf, decoded by apimachinery's protobuf serializer into the typed
// object, then kept through a transform to the fields a Child keeps; and an owner Evaluator
// served as JSON, decoded into an unstructured object (a dynamic informer), then pruned of its
// managed fields and kubectl's copy as the engine prunes one. Each reports time and allocations
// per object, and cached-B/obj, the heap one decoded object keeps (heapPerObject).
func BenchmarkDecodersBesideApimachinery(b *testing.B) {
	var d appsv1.Deployment
	if err := json.Unmarshal([]byte(servedDeploymentJSON), &d); err != nil {
		b.Fatal(err)
	}
	codec := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	var buf bytes.Buffer
	if err := codec.Encode(&d, &buf); err != nil {
		b.Fatal(err)
	}
	child, owner := buf.Bytes(), []byte(servedEvaluatorJSON)
	for _, c := range []struct {
		name   string
		raw    []byte
		decode func([]byte) (any, error)
	}{
		{"child/protobuf/engine", child, func(raw []byte) (any, error) { return cached.Form(raw, true) }},
		{"child/protobuf/apimachinery+transform", child, func(raw []byte) (any, error) {
			obj, _, err := codec.Decode(raw, nil, nil)
			if err != nil {
				return nil, err
			}
			return keptDeployment(obj.(*appsv1.Deployment)), nil
		}},
		{"owner/json/engine", owner, func(raw []byte) (any, error) { return cached.Form(raw, false) }},
		{"owner/json/apimachinery+transform", owner, func(raw []byte) (any, error) {
			u, err := decodeUnstructured(raw)
			if err != nil {
				return nil, err
			}
			u.SetManagedFields(nil)
			annotations := u.GetAnnotations()
			delete(annotations, "kubectl.kubernetes.io/last-applied-configuration")
			u.SetAnnotations(annotations)
			return u, nil
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			kept := heapPerObject(b, c.raw, c.decode)
			b.ReportAllocs()
			b.SetBytes(int64(len(c.raw)))
			for b.Loop() {
				if _, err := c.decode(c.raw); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(kept, "cached-B/obj") // after the loop, which resets reported metrics
		})
	}
}

// keptDeployment is what a client-go transform keeps of d for the engine: the fields a Child
// holds (identity, the controller reference, the spec hash, replicas, the rollout's counts and
// the refusal of its pods), in a new object so that the rest can be collected.
func keptDeployment(d *appsv1.Deployment) *appsv1.Deployment {
	kept := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Name: d.Name, Namespace: d.Namespace, UID: d.UID, ResourceVersion: d.ResourceVersion, Generation: d.Generation,
		DeletionTimestamp: d.DeletionTimestamp,
	}}
	if hash, ok := d.Annotations[evalsi.AnnotationSpecHash]; ok {
		kept.Annotations = map[string]string{evalsi.AnnotationSpecHash: hash}
	}
	if ref := metav1.GetControllerOf(d); ref != nil {
		kept.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	kept.Spec.Replicas = d.Spec.Replicas
	kept.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Status.ObservedGeneration, Replicas: d.Status.Replicas,
		ReadyReplicas: d.Status.ReadyReplicas, UpdatedReplicas: d.Status.UpdatedReplicas, AvailableReplicas: d.Status.AvailableReplicas}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentReplicaFailure {
			kept.Status.Conditions = []appsv1.DeploymentCondition{{Type: c.Type, Status: c.Status, Message: c.Message}}
		}
	}
	return kept
}
