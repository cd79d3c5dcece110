package bench

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
)

// childKinds are the children of an autoscaled Evaluator.
var childKinds = []schema.GroupVersionResource{evalsi.Deployments, evalsi.ServiceAccounts, evalsi.ScaledObjects, evalsi.TriggerAuthentications, evalsi.NetworkPolicies}

// namespaceWatch follows a round's Evaluators and their children with informers, so that
// measuring convergence costs the API server a watch rather than repeated lists.
type namespaceWatch struct {
	evaluators cache.SharedIndexInformer
	children   []cache.SharedIndexInformer
}

func watchNamespace(b testing.TB, ctx context.Context, ns string) *namespaceWatch {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(env.Dynamic(), 0, ns, nil)
	children := dynamicinformer.NewFilteredDynamicSharedInformerFactory(env.Dynamic(), 0, ns, func(o *metav1.ListOptions) {
		o.LabelSelector = evalsi.LabelManagedBy + "=" + evalsi.ManagedBy
	})
	w := &namespaceWatch{evaluators: f.ForResource(evalsi.Evaluators).Informer()}
	for _, gvr := range childKinds {
		w.children = append(w.children, children.ForResource(gvr).Informer())
	}
	f.Start(ctx.Done())
	children.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	children.WaitForCacheSync(ctx.Done())
	return w
}

// converged reports whether all n Evaluators have every child and a status of their current
// generation.
func (w *namespaceWatch) converged(n int) bool {
	for _, inf := range w.children {
		if len(inf.GetStore().ListKeys()) != n {
			return false
		}
	}
	return w.every(n, func(ev *unstructured.Unstructured) bool {
		g, found, _ := unstructured.NestedInt64(ev.Object, "status", "observedGeneration")
		return found && g == ev.GetGeneration()
	})
}

// ready reports whether all n Evaluators are Ready for their current generation.
func (w *namespaceWatch) ready(n int) bool {
	return w.converged(n) && w.every(n, func(ev *unstructured.Unstructured) bool {
		return condition(ev, evalsi.ConditionReady)["status"] == "True"
	})
}

// pastProgressDeadline reports whether all n Deployments have passed their progress deadline
// (Progressing False, ProgressDeadlineExceeded): without pods, the controller-manager's last
// change to each, ten minutes after it was made.
func (w *namespaceWatch) pastProgressDeadline(n int) bool {
	deployments := w.children[slices.Index(childKinds, evalsi.Deployments)].GetStore().List()
	if len(deployments) != n {
		return false
	}
	for _, o := range deployments {
		if c := condition(o.(*unstructured.Unstructured), "Progressing"); c["status"] != "False" || c["reason"] != "ProgressDeadlineExceeded" {
			return false
		}
	}
	return true
}

// condition is obj's status condition of type t, nil when it has none.
func condition(obj *unstructured.Unstructured, t string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == t {
			return m
		}
	}
	return nil
}

func (w *namespaceWatch) every(n int, ok func(*unstructured.Unstructured) bool) bool {
	evs := w.evaluators.GetStore().List()
	if len(evs) != n {
		return false
	}
	for _, o := range evs {
		if !ok(o.(*unstructured.Unstructured)) {
			return false
		}
	}
	return true
}

// outputs lists the comparable form of every Evaluator and child in ns, by kind and name.
func outputs(t testing.TB, ctx context.Context, ns string) map[string]any {
	out := map[string]any{}
	for _, gvr := range append([]schema.GroupVersionResource{evalsi.Evaluators}, childKinds...) {
		list, err := env.Dynamic().Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			if gvr == evalsi.ServiceAccounts && o.GetLabels()[evalsi.LabelManagedBy] != evalsi.ManagedBy {
				continue // the namespace's default account
			}
			out[o.GetKind()+"/"+o.GetName()] = comparable(t, &o, ns)
		}
	}
	return out
}

// comparable keeps what a contender decides of obj, with what the API server or the round
// chose (namespace, UIDs, versions, times) masked.
func comparable(t testing.TB, obj *unstructured.Unstructured, ns string) any {
	refs := obj.GetOwnerReferences()
	labels := obj.GetLabels()
	for i := range refs {
		// A child's shard bucket is its owner's UID's: masked where it is that one's.
		if b, ok := labels[evalsi.LabelShardBucket]; ok && refs[i].Controller != nil && *refs[i].Controller && b == strconv.Itoa(shard.Bucket(string(refs[i].UID))) {
			labels[evalsi.LabelShardBucket] = "(the bucket of the owner's UID)"
		}
		refs[i].UID = ""
	}
	annotations := obj.GetAnnotations()
	if _, ok := annotations[evalsi.AnnotationSpecHash]; ok {
		annotations[evalsi.AnnotationSpecHash] = "(a hash of the rendering, which holds the namespace)"
	}
	kept := map[string]any{"labels": labels, "annotations": annotations, "owners": refs}
	if obj.GetKind() == "Evaluator" {
		status, _, _ := unstructured.NestedMap(obj.Object, "status")
		conds, _, _ := unstructured.NestedSlice(status, "conditions")
		for _, c := range conds {
			delete(c.(map[string]any), "lastTransitionTime")
		}
		if conds != nil {
			status["conditions"] = conds
		}
		kept["status"] = status
	} else {
		for k, v := range obj.Object {
			if k != "metadata" && k != "status" {
				kept[k] = v
			}
		}
	}
	raw, err := json.Marshal(kept)
	if err != nil {
		t.Fatalf("encoding %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	var masked any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(raw), ns, "NAMESPACE")), &masked); err != nil {
		// A namespace that names part of the JSON's syntax would mask it into nonsense: the
		// comparison must not pass for want of anything to compare.
		t.Fatalf("masking %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	return masked
}

// What the round chose (namespace, owner UIDs and the shard buckets they give) is masked; a
// bucket that is not the owner's is not.
func TestComparableMasksTheRound(t *testing.T) {
	child := func(ns, uid, bucket string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
			"metadata": map[string]any{"name": "pool", "namespace": ns, "labels": map[string]any{evalsi.LabelShardBucket: bucket},
				"ownerReferences": []any{map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator", "name": "pool", "uid": uid, "controller": true}}}}}
	}
	bucket := func(uid string) string { return strconv.Itoa(shard.Bucket(uid)) }
	a, b := "2b1f6a3e-0000-4000-8000-000000000001", "97c04d11-5e2a-4b7f-9a01-3c5d2e8f6b42"
	if bucket(a) == bucket(b) {
		t.Fatal("the two UIDs must fall in different buckets")
	}
	if diff := cmp.Diff(comparable(t, child("ns-a", a, bucket(a)), "ns-a"), comparable(t, child("ns-b", b, bucket(b)), "ns-b")); diff != "" {
		t.Errorf("children alike but for the round's choices differ:\n%s", diff)
	}
	if cmp.Equal(comparable(t, child("ns-a", a, bucket(a)), "ns-a"), comparable(t, child("ns-b", b, bucket(a)), "ns-b")) {
		t.Error("a child labelled with another owner's bucket compares equal")
	}
}
