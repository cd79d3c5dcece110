package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
)

// wanted returns the kinds of the selected controllers.
func (e *Engine) wanted() []*Kind {
	var out []*Kind
	for _, k := range e.cfg.Kinds {
		if len(e.cfg.Controllers) == 0 || slices.Contains(e.cfg.Controllers, k.Controller) {
			out = append(out, k)
		}
	}
	return out
}

// discover asks the API server which of the resources the selected controllers need are served,
// starts controllers and child informers that became available, and stops child informers of
// resources that went away. Objects whose children changed availability are reconciled again.
func (e *Engine) discover(ctx context.Context, wg *sync.WaitGroup) {
	if !e.checkServerVersion() {
		// Controllers already running see the refusal and write nothing; none starts.
		return
	}
	want := map[schema.GroupVersionResource]bool{}
	for _, k := range e.wanted() {
		want[k.Resource] = true
		for _, c := range k.Children {
			want[c] = true
		}
	}
	served := e.servedResources(want)
	var changed []schema.GroupVersionResource
	e.mu.Lock()
	for gvr := range want {
		if served[gvr] != e.served[gvr] {
			changed = append(changed, gvr)
		}
	}
	e.served = served
	e.mu.Unlock()

	for _, k := range e.wanted() {
		if k.Off != nil {
			if why := k.Off(); why != "" {
				e.sayOff(k, why)
				continue
			}
		}
		if !served[k.Resource] {
			e.sayOff(k, "its CRD is not served; it starts when the CRD is installed", "resource", k.Resource.String())
			continue
		}
		e.mu.Lock()
		c := e.controllers[k.Controller]
		e.mu.Unlock()
		if c == nil {
			if why := e.mayNotWatch(ctx, k); why != "" {
				e.sayOff(k, why, "resource", k.Resource.String())
				continue
			}
			c = e.startController(ctx, k, wg)
		}
		for _, gvr := range k.Children {
			if !slices.Contains(changed, gvr) {
				continue
			}
			if served[gvr] {
				e.log.Info("child resource served, watching it", "controller", k.Controller, "resource", gvr.String())
				e.ensureInformer(ctx, gvr, c.childNamespace(), nil, e.enqueueOwner)
			} else {
				e.log.Warn("child resource no longer served", "controller", k.Controller, "resource", gvr.String())
				e.stopInformer(informerKey{gvr, c.childNamespace()})
			}
			c.enqueueAll()
		}
	}
	e.mu.Lock()
	e.synced = true
	e.mu.Unlock()
}

// servedResources returns which of want the API server serves, by discovery of their groups.
func (e *Engine) servedResources(want map[schema.GroupVersionResource]bool) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	byGV := map[schema.GroupVersion][]schema.GroupVersionResource{}
	for gvr := range want {
		byGV[gvr.GroupVersion()] = append(byGV[gvr.GroupVersion()], gvr)
	}
	for gv, gvrs := range byGV {
		list, err := e.discovery.ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			e.mu.Lock()
			prev := e.served
			e.mu.Unlock()
			if !apierrors.IsNotFound(err) {
				// Keep what was known rather than tear controllers down on a passing error.
				e.log.Warn("discovery failed", "groupVersion", gv.String(), "err", err)
				for _, gvr := range gvrs {
					out[gvr] = prev[gvr]
				}
			}
			continue
		}
		for _, r := range list.APIResources {
			for _, gvr := range gvrs {
				if r.Name == gvr.Resource {
					out[gvr] = true
					e.mu.Lock()
					e.kinds[gv.WithKind(r.Kind)] = gvr
					e.mu.Unlock()
				}
			}
		}
	}
	return out
}

// resourceOf returns the resource of objects of apiVersion and kind, as discovery saw it, and
// false when discovery has not seen it served.
func (e *Engine) resourceOf(apiVersion, kind string) (schema.GroupVersionResource, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if gvr, ok := e.kinds[gv.WithKind(kind)]; ok || apiVersion != "" {
		return gvr, ok
	}
	// An object read without its apiVersion: the one served resource of its kind.
	for gvk, gvr := range e.kinds {
		if gvk.Kind == kind {
			return gvr, true
		}
	}
	return schema.GroupVersionResource{}, false
}

// isServed reports whether discovery last saw gvr.
func (e *Engine) isServed(gvr schema.GroupVersionResource) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served[gvr]
}

// checkServerVersion reads the server's version, records it in the metrics, and logs when the
// verdict changes. It returns false when the engine must not reconcile. A version that cannot be
// read keeps the last verdict (an API server restarting is no reason to stop or to start).
func (e *Engine) checkServerVersion() bool {
	v, err := e.discovery.ServerVersion()
	if err != nil {
		e.log.Warn("reading the Kubernetes version", "err", err)
		return e.VersionRefusal() == ""
	}
	supported, reconcile, why := versionVerdict(v, !e.cfg.AllowUnsupportedMinor)
	e.metrics.setServerVersion(v.GitVersion, supported)
	refusal := ""
	if !reconcile {
		refusal = why
	}
	e.refusal.Store(refusal)
	if why != e.lastVersionWhy { // only Run's goroutine reads and writes it
		switch {
		case !reconcile:
			e.log.Error(why, "serverVersion", v.GitVersion, "supportedMinor", evalsi.KubernetesMinor)
		case !supported:
			e.log.Warn(why, "serverVersion", v.GitVersion, "supportedMinor", evalsi.KubernetesMinor)
		case e.lastVersionWhy != "":
			e.log.Info("the Kubernetes minor is supported again", "serverVersion", v.GitVersion)
		}
		e.lastVersionWhy = why
	}
	return reconcile
}

// versionRefusal says why the engine does not reconcile on this server, or "" when it does.
func (e *Engine) VersionRefusal() string {
	why, _ := e.refusal.Load().(string)
	return why
}

// sayOff writes, once for each reason, that controller k is off and why.
func (e *Engine) sayOff(k *Kind, why string, attrs ...any) {
	if e.offLogged[k.Controller] == why {
		return
	}
	e.offLogged[k.Controller] = why
	e.log.Warn("controller off: "+why, append([]any{"controller", k.Controller}, attrs...)...)
}

// mayNotWatch says why the operator may not list and watch k's objects where it reconciles them,
// by asking the API server (a SelfSubjectAccessReview, which every identity may make), or ""
// when it may or the answer cannot be had: an informer that may not list would only fail, at
// error level, until the rights come. The evalsi chart grants the kinds the cluster serves at
// its install, so a kind installed after it is off until the chart is upgraded.
func (e *Engine) mayNotWatch(ctx context.Context, k *Kind) string {
	ns := e.cfg.Namespace
	if !k.Namespaced {
		ns = ""
	}
	for _, verb := range []string{"list", "watch"} {
		review, err := e.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: k.Resource.Group, Resource: k.Resource.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return "" // the informer says what is wrong, if anything is
		}
		if !review.Status.Allowed {
			where := "cluster-wide"
			if ns != "" {
				where = "in namespace " + ns
			}
			return fmt.Sprintf("its CRD is served, but this operator may not %s %s %s (the evalsi chart grants the kinds served when it is installed or upgraded: helm upgrade it); it starts once it may",
				verb, k.Resource.Resource, where)
		}
	}
	return ""
}
