package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/unstructuredjson"
)

// Children maps a child's "Kind/namespace/name" to what the cache holds of it.
type Children map[string]*cached.Child

func childKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// Get returns the live child of kind in namespace called name, or nil.
func (c Children) Get(kind, namespace, name string) *cached.Child {
	return c[childKey(kind, namespace, name)]
}

// SyncChildren makes the children of r's object what desired says (bare objects it stamps with
// StampChild, changing them in place): each desired child that is
// missing, changed by the rendering (its spec hash), or drifted (a field the rendering sets is no
// longer the operator's) is applied with server-side apply; children of the owner that are no
// longer desired are deleted. Children that already match are left alone, so steady state writes
// nothing. A child whose rendering the API server refused for the object's generation
// (Request.Refused) is not applied again: the refusal stands. It returns the live children after
// the changes.
func (c *Controller) SyncChildren(ctx context.Context, r *Request, desired []*unstructured.Unstructured) (Children, error) {
	owner := r.Object
	live := Children{}
	ns := c.childNamespace()
	informers := map[string]*informer{}
	for _, gvr := range c.kind.ChildResources {
		inf := c.informers.childInformer(gvr, ns)
		if inf == nil {
			continue
		}
		if !inf.synced() {
			return nil, errCacheNotSynced
		}
		informers[gvr.Resource] = inf
		for _, c := range inf.ownedBy(string(owner.GetUID())) {
			live[childKey(c.Kind(), c.Namespace, c.Name)] = c
		}
	}

	for _, want := range desired {
		dependOnSibling(want, live)
	}
	out := Children{}
	var stale []pendingApply
	for _, want := range desired {
		if err := StampChild(owner, want); err != nil {
			return nil, err
		}
		key := childKey(want.GetKind(), want.GetNamespace(), want.GetName())
		cur := live[key]
		delete(live, key)
		why := staleness(want, cur)
		if why == "" {
			out[key] = cur
			continue
		}
		if r.Refused == rendering(want) {
			// The API server refused this very rendering for this generation: applying it again
			// on every resync would be refused again. A new spec or operator setting renders
			// something else and is applied.
			return nil, &TerminalError{Reason: evalsi.ReasonInvalidSpec, Refused: r.Refused, Err: errors.New(stalledMessage(owner))}
		}
		c.log.Debug("applying child", "owner", owner.GetName(), "child", key, "why", why)
		stale = append(stale, pendingApply{key: key, want: want, cur: cur, why: why})
	}
	// The applies of a wave go out together, so that a new pool waits for two round trips rather
	// than one per child. Every applied child is remembered, even when another of its wave failed.
	var applied []string
	for _, wave := range applyWaves(c.kind.ChildOrder, stale) {
		c.applyWave(ctx, wave, informers, owner)
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
			c.warnRefused(owner, first)
			return nil, first
		}
	}
	if len(applied) > 0 {
		c.Eventf(owner, corev1.EventTypeNormal, "Updated", "updated %s", strings.Join(applied, ", "))
	}
	for _, stale := range deletionOrder(c.kind.ChildOrder, live) {
		if err := c.deleteChild(ctx, stale); err != nil {
			c.warnRefused(owner, err)
			return nil, err
		}
		c.Eventf(owner, corev1.EventTypeNormal, "Deleted", "deleted %s %s: no longer desired", stale.Kind(), stale.Name)
	}
	return out, nil
}

// ReasonChildRefused is the reason of the Warning Event that tells an owner's readers why its
// children do not change (warnRefused).
const ReasonChildRefused = "ChildRefused"

// warnRefused records a Warning Event on owner when the API server answered a write of one of
// its children with a refusal that a person must resolve: RBAC or a quota (403), a body it cannot
// read (400, or 500 where server-side apply cannot type it), a namespace that is gone (404). The
// write is retried with backoff and the owner's status is left as it was; without the Event, its
// writer, who may not read the operator's log, would see no reason why nothing changes. The
// Events of one owner and reason are counted as one by the recorder. Answers that say wait (a
// conflict, throttling, a busy or unreachable server) and writes this replica did not send (an
// ended tenure) are not told.
func (c *Controller) warnRefused(owner *unstructured.Unstructured, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return
	}
	switch status.Status().Code {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusInternalServerError:
		c.Eventf(owner, corev1.EventTypeWarning, ReasonChildRefused, "%v; retrying", err)
	}
}

// pendingApply is a child to apply (want, over the cached cur, for the reason why) and, once
// applied, the API server's answer or error.
type pendingApply struct {
	key, why string
	want     *unstructured.Unstructured
	cur      *cached.Child
	obj      *cached.Child
	err      error
}

// applyWave applies the children of wave at once, each remembered by its informer as soon as its
// apply returns, before the informer can show it: its echo queues nothing. A child owner does
// not have yet is applied only when its name is free (claimName).
func (c *Controller) applyWave(ctx context.Context, wave []pendingApply, informers map[string]*informer, owner *unstructured.Unstructured) {
	var wg sync.WaitGroup
	for i := range wave {
		a := &wave[i]
		gvr, _ := c.served.resourceOfKind(a.want.GetAPIVersion(), a.want.GetKind())
		inf := informers[gvr.Resource]
		if a.cur == nil && inf != nil {
			if a.err = claimName(inf, a.want, owner); a.err != nil {
				continue
			}
		}
		wg.Go(func() {
			if a.obj, a.err = c.apply(ctx, a.want, a.cur); a.err == nil && inf != nil {
				inf.written.Remember(a.obj)
			}
		})
	}
	wg.Wait()
}

// applyWaves splits the children to apply into the waves they go out in: those order applies
// first, then every other child at once.
func applyWaves(order *ChildOrder, stale []pendingApply) [][]pendingApply {
	var first, rest []pendingApply
	for _, a := range stale {
		if order != nil && slices.Contains(order.ApplyFirst, a.want.GetKind()) {
			first = append(first, a)
		} else {
			rest = append(rest, a)
		}
	}
	return slices.DeleteFunc([][]pendingApply{first, rest}, func(w []pendingApply) bool { return len(w) == 0 })
}

// dependOnSibling gives want, when it names a sibling it outlives (evalsi.AnnotationOutlives),
// a second owner reference, to that sibling as it is live: the garbage collector then deletes
// want only once the sibling is gone, also when the owner's deletion deletes both. Until the
// sibling is live (its first apply, in this reconcile), want goes without it; the sibling's
// creation reconciles the owner again, and want is applied with it then.
func dependOnSibling(want *unstructured.Unstructured, live Children) {
	kind, name, ok := strings.Cut(want.GetAnnotations()[evalsi.AnnotationOutlives], "/")
	if !ok {
		return
	}
	sibling := live.Get(kind, want.GetNamespace(), name)
	if sibling == nil || sibling.GetDeletionTimestamp() != nil {
		return
	}
	want.SetOwnerReferences(append(want.GetOwnerReferences(), metav1.OwnerReference{
		APIVersion: sibling.APIVersion(), Kind: kind, Name: name, UID: sibling.GetUID(),
	}))
}

// deletionOrder is the order the children no longer desired go in: those order deletes first,
// then the others, then those it deletes last, each group by kind and name.
func deletionOrder(order *ChildOrder, live map[string]*cached.Child) []*cached.Child {
	rank := func(c *cached.Child) int {
		switch {
		case order == nil:
			return 1
		case slices.Contains(order.DeleteFirst, c.Kind()):
			return 0
		case slices.Contains(order.DeleteLast, c.Kind()):
			return 2
		}
		return 1
	}
	children := slices.Collect(maps.Values(live))
	slices.SortFunc(children, func(a, b *cached.Child) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.Kind(), b.Kind()), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return children
}

// staleness says why live is not the applied form of want, or "" when it is: the rendering
// changed (spec hash), or a field that want sets is no longer the operator's (drift: another
// writer changed it). Fields others add or the API server defaults are not compared.
func staleness(want *unstructured.Unstructured, live *cached.Child) string {
	if live == nil {
		return "missing"
	}
	if want.GetAnnotations()[evalsi.AnnotationSpecHash] != live.SpecHash {
		return "rendering changed"
	}
	if path := live.Unowned(want); path != "" {
		return "drifted at " + path
	}
	return ""
}

// apply writes want with server-side apply under the operator's field manager, taking over
// conflicting fields, and returns what the API server answered as the caches keep it. A
// Deployment rendered without spec.replicas (a ScaledObject owns scaling) first hands its
// replicas to a separate manager, if the operator owned them; cur is the cached live object, nil
// when there is none.
func (c *Controller) apply(ctx context.Context, want *unstructured.Unstructured, cur *cached.Child) (*cached.Child, error) {
	gvr, ok := c.served.resourceOfKind(want.GetAPIVersion(), want.GetKind())
	if !ok {
		return nil, fmt.Errorf("no served resource of %s %s: its kind declares no such child", want.GetAPIVersion(), want.GetKind())
	}
	if path := c.kind.Handover[want.GetKind()]; path != nil && cur != nil {
		if _, set, _ := unstructured.NestedFieldNoCopy(want.Object, path...); !set {
			if err := c.handOver(ctx, gvr, want, path); err != nil {
				return nil, err
			}
		}
	}
	body, err := unstructuredjson.Marshal(want.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s/%s: %w", want.GetKind(), want.GetNamespace(), want.GetName(), err)
	}
	// The query of metav1.PatchOptions{FieldManager, Force: true, FieldValidation}, written out:
	// the parameter codec converts the options by reflection at each call.
	raw, err := cached.RawResult(c.rest.Patch(types.ApplyPatchType).AbsPath(cached.ResourcePath(gvr, want.GetNamespace()), want.GetName()).
		Param("fieldManager", FieldManager).Param("force", "true").Param("fieldValidation", evalsi.ChildFieldValidation).
		SetHeader("Accept", cached.AcceptChild).Body(body).Do(ctx))
	if apierrors.IsInvalid(err) {
		// The spec rendered into something the API server rejects; retrying cannot help.
		return nil, refusedChild(want, err)
	}
	if err != nil {
		return nil, fmt.Errorf("applying %s %s/%s: %w", want.GetKind(), want.GetNamespace(), want.GetName(), err)
	}
	return cached.DecodeServedChild(raw)
}

// rendering names one rendering of a child: its kind, name and spec hash.
func rendering(want *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s rendering %s", want.GetKind(), want.GetName(), want.GetAnnotations()[evalsi.AnnotationSpecHash])
}

// refusedChild is the terminal error of a child's rendering that the API server refused: it
// records the rendering, so that it is not applied again for the same generation.
func refusedChild(want *unstructured.Unstructured, err error) error {
	return &TerminalError{Reason: evalsi.ReasonInvalidSpec, Refused: rendering(want),
		Err: fmt.Errorf("%s %s (rendering %s) was refused by the API server: %w",
			want.GetKind(), want.GetName(), want.GetAnnotations()[evalsi.AnnotationSpecHash], err)}
}

// deleteChild deletes a child that is no longer desired, if it is still the object seen.
func (c *Controller) deleteChild(ctx context.Context, child *cached.Child) error {
	gvr, ok := c.served.resourceOfKind(child.APIVersion(), child.Kind())
	if !ok {
		return fmt.Errorf("no served resource of %s %s", child.APIVersion(), child.Kind())
	}
	uid := child.GetUID()
	err := c.client.Resource(gvr).Namespace(child.Namespace).Delete(ctx, child.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s/%s: %w", child.Kind(), child.Namespace, child.Name, err)
	}
	return nil
}

// Staleness says why live, a child as the API server holds it, is not the applied form of want
// (the rendering changed, or a field want sets is no longer the operator's), or "" when it is:
// what SyncChildren asks of each child before it applies it.
func Staleness(want, live *unstructured.Unstructured) (string, error) {
	raw, err := live.MarshalJSON()
	if err != nil {
		return "", err
	}
	child, err := cached.DecodeChild(raw)
	if err != nil {
		return "", err
	}
	return staleness(want, child), nil
}
