package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"

	"evals.si/operator/evalsi"
)

// errCacheNotSynced says that a child informer has not listed yet: the reconcile comes back
// shortly rather than take every child for missing.
var errCacheNotSynced = errors.New("the children's cache has not synced yet")

// replicasHandoverManager briefly owns a Deployment's spec.replicas while the operator stops
// applying it, so that dropping the field from the operator's apply does not reset it to 1.
const replicasHandoverManager = "evalsi-operator-replicas-handover"

// children maps a child's "Kind/namespace/name" to what the cache holds of it.
type children map[string]*cachedChild

func childKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// get returns the live child of kind in namespace called name, or nil.
func (c children) get(kind, namespace, name string) *cachedChild {
	return c[childKey(kind, namespace, name)]
}

// syncChildren makes owner's children what desired says: each desired child that is missing,
// changed by the operator's rendering, or drifted (a field the operator sets differs) is applied
// with server-side apply; children of the owner that are no longer desired are deleted. Children
// that already match are left alone, so steady state writes nothing. It returns the live
// children after the changes.
func (e *Engine) syncChildren(ctx context.Context, k *kind, owner *unstructured.Unstructured, desired []*unstructured.Unstructured) (children, error) {
	live := children{}
	ns := k.childNamespace(e.cfg)
	informers := map[string]*informer{}
	for _, gvr := range k.children {
		inf := e.childInformer(gvr, ns)
		if inf == nil {
			continue
		}
		if !inf.shared.HasSynced() {
			return nil, errCacheNotSynced
		}
		informers[gvr.Resource] = inf
		objs, err := inf.ownedBy(string(owner.GetUID()))
		if err != nil {
			return nil, fmt.Errorf("listing children: %w", err)
		}
		for _, c := range objs {
			live[childKey(c.Kind, c.Namespace, c.Name)] = c
		}
	}

	out := children{}
	var stale []pendingApply
	for _, want := range desired {
		key := childKey(want.GetKind(), want.GetNamespace(), want.GetName())
		cur := live[key]
		delete(live, key)
		why := staleness(want, cur)
		if why == "" {
			out[key] = cur
			continue
		}
		if msg, ok := refusedBefore(owner, want); ok {
			// The API server refused this very rendering for this generation: applying it again
			// on every resync would be refused again. A new spec or operator setting renders
			// something else and is applied.
			return nil, Terminal(evalsi.ReasonInvalidSpec, errors.New(msg))
		}
		e.log.Debug("applying child", "owner", owner.GetName(), "child", key, "why", why)
		stale = append(stale, pendingApply{key: key, want: want, cur: cur, why: why})
	}
	// The applies of a wave go out together, so that a new pool waits for two round trips rather
	// than one per child. Every applied child is remembered, even when another of its wave failed.
	var applied []string
	for _, wave := range applyWaves(stale) {
		e.applyWave(ctx, wave, informers)
		var first error // in the rendering's order, as when the applies went one by one
		for _, a := range wave {
			if a.err != nil {
				first = cmp.Or(first, a.err)
				continue
			}
			if a.cur != nil {
				// Creating children is what a new object is for; an event says when one had to
				// change (a new spec, or drift repaired).
				applied = append(applied, fmt.Sprintf("%s %s (%s)", a.want.GetKind(), a.want.GetName(), a.why))
			}
			out[a.key] = a.obj
		}
		if first != nil {
			return nil, first
		}
	}
	if len(applied) > 0 {
		e.recorder.Eventf(owner, corev1.EventTypeNormal, "Updated", "updated %s", strings.Join(applied, ", "))
	}
	for _, stale := range live {
		if err := e.deleteChild(ctx, stale); err != nil {
			return nil, err
		}
		e.recorder.Eventf(owner, corev1.EventTypeNormal, "Deleted", "deleted %s %s: no longer desired", stale.Kind, stale.Name)
	}
	return out, nil
}

// pendingApply is a child to apply (want, over the cached cur, for the reason why) and, once
// applied, the API server's answer or error.
type pendingApply struct {
	key, why string
	want     *unstructured.Unstructured
	cur      *cachedChild
	obj      *cachedChild
	err      error
}

// applyWave applies the children of wave at once, each remembered by its informer as soon as its
// apply returns, before the informer can show it: its echo queues nothing.
func (e *Engine) applyWave(ctx context.Context, wave []pendingApply, informers map[string]*informer) {
	var wg sync.WaitGroup
	for i := range wave {
		a := &wave[i]
		inf := informers[evalsi.ChildResources[a.want.GetKind()].Resource]
		wg.Go(func() {
			if a.obj, a.err = e.apply(ctx, a.want, a.cur); a.err == nil && inf != nil {
				inf.written.remember(a.obj)
			}
		})
	}
	wg.Wait()
}

// applyWaves splits the children to apply into the waves they go out in: ServiceAccounts first,
// as a pod the Deployment controller creates before its service account exists is refused and
// retried only after a backoff; then every other child at once.
func applyWaves(stale []pendingApply) [][]pendingApply {
	var accounts, rest []pendingApply
	for _, a := range stale {
		if a.want.GetKind() == "ServiceAccount" {
			accounts = append(accounts, a)
		} else {
			rest = append(rest, a)
		}
	}
	return slices.DeleteFunc([][]pendingApply{accounts, rest}, func(w []pendingApply) bool { return len(w) == 0 })
}

// staleness says why live is not the applied form of want, or "" when it is: the rendering
// changed (spec hash), or a field that want sets is no longer the operator's (drift: another
// writer changed it). Fields others add or the API server defaults are not compared.
func staleness(want *unstructured.Unstructured, live *cachedChild) string {
	if live == nil {
		return "missing"
	}
	if want.GetAnnotations()[evalsi.AnnotationSpecHash] != live.specHash {
		return "rendering changed"
	}
	if path := live.unowned(want); path != "" {
		return "drifted at " + path
	}
	return ""
}

// number returns v as a float64 when it is a JSON number (int64 or float64 in unstructured
// content).
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// apply writes want with server-side apply under the operator's field manager, taking over
// conflicting fields, and returns what the API server answered as the caches keep it. A
// Deployment rendered without spec.replicas (a ScaledObject owns scaling) first hands its
// replicas to a separate manager, if the operator owned them; cur is the cached live object, nil
// when there is none.
func (e *Engine) apply(ctx context.Context, want *unstructured.Unstructured, cur *cachedChild) (*cachedChild, error) {
	gvr, ok := evalsi.ChildResources[want.GetKind()]
	if !ok {
		return nil, fmt.Errorf("no resource known for kind %s", want.GetKind())
	}
	if gvr == evalsi.Deployments && cur != nil {
		if _, set, _ := unstructured.NestedFieldNoCopy(want.Object, "spec", "replicas"); !set {
			if err := e.handOverReplicas(ctx, want); err != nil {
				return nil, err
			}
		}
	}
	body, err := want.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s/%s: %w", want.GetKind(), want.GetNamespace(), want.GetName(), err)
	}
	force := true
	raw, err := rawResult(e.rest.Patch(types.ApplyPatchType).AbsPath(resourcePath(gvr, want.GetNamespace()), want.GetName()).
		VersionedParams(&metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, metav1.ParameterCodec).
		Body(body).Do(ctx))
	if apierrors.IsInvalid(err) {
		// The spec rendered into something the API server rejects; retrying cannot help.
		return nil, Terminal(evalsi.ReasonInvalidSpec, fmt.Errorf("%s: %w", refusal(want), err))
	}
	if err != nil {
		return nil, fmt.Errorf("applying %s %s/%s: %w", want.GetKind(), want.GetNamespace(), want.GetName(), err)
	}
	return decodeChild(raw)
}

// refusal begins the message of a child the API server refused: it names the child and the
// rendering (its spec hash), so that the same rendering is known again (refusedBefore).
func refusal(want *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s (rendering %s) was refused by the API server",
		want.GetKind(), want.GetName(), want.GetAnnotations()[evalsi.AnnotationSpecHash])
}

// refusedBefore returns the message of owner's Stalled condition when it says that the API server
// refused want, rendered the same way, for owner's current generation.
func refusedBefore(owner, want *unstructured.Unstructured) (string, bool) {
	c := stalledCondition(owner)
	msg, _ := c["message"].(string)
	return msg, c != nil && strings.HasPrefix(msg, refusal(want)+":")
}

// handOverReplicas keeps a Deployment's current replica count when the operator stops applying
// spec.replicas: if the operator's manager owns the field, another manager applies the same value
// first, so that the field stays owned and is not reset to its default of 1.
func (e *Engine) handOverReplicas(ctx context.Context, want *unstructured.Unstructured) error {
	client := e.client.Resource(evalsi.Deployments).Namespace(want.GetNamespace())
	cur, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Deployment %s/%s: %w", want.GetNamespace(), want.GetName(), err)
	}
	owns, err := ownsReplicas(cur)
	if err != nil || !owns {
		return err
	}
	replicas, _, _ := unstructured.NestedInt64(cur.Object, "spec", "replicas")
	handover := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": want.GetName(), "namespace": want.GetNamespace()},
		"spec":     map[string]any{"replicas": replicas},
	}}
	_, err = client.Apply(ctx, want.GetName(), handover, metav1.ApplyOptions{FieldManager: replicasHandoverManager, Force: true})
	if err != nil {
		return fmt.Errorf("handing over replicas of Deployment %s/%s: %w", want.GetNamespace(), want.GetName(), err)
	}
	return nil
}

// ownsReplicas reports whether the operator's apply manager owns deploy's spec.replicas, read
// from its managed fields by client-go's ExtractDeployment.
func ownsReplicas(deploy *unstructured.Unstructured) (bool, error) {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deploy.Object, &d); err != nil {
		return false, fmt.Errorf("reading Deployment %s: %w", deploy.GetName(), err)
	}
	owned, err := appsv1ac.ExtractDeployment(&d, FieldManager)
	if err != nil {
		return false, fmt.Errorf("reading the fields the operator owns in Deployment %s: %w", deploy.GetName(), err)
	}
	return owned.Spec != nil && owned.Spec.Replicas != nil, nil
}

// deleteChild deletes a child that is no longer desired, if it is still the object seen.
func (e *Engine) deleteChild(ctx context.Context, child *cachedChild) error {
	gvr := evalsi.ChildResources[child.Kind]
	if gvr == (schema.GroupVersionResource{}) {
		return fmt.Errorf("no resource known for kind %s", child.Kind)
	}
	uid := child.UID
	err := e.client.Resource(gvr).Namespace(child.Namespace).Delete(ctx, child.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s/%s: %w", child.Kind, child.Namespace, child.Name, err)
	}
	return nil
}
