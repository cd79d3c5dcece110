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
		for _, c := range k.ChildResources {
			want[c] = true
		}
	}
	served := e.askServed(want)
	changed := e.served.replace(served, want)

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
		for _, gvr := range k.ChildResources {
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

// askServed returns which of want the API server serves, by discovery of their groups.
func (e *Engine) askServed(want map[schema.GroupVersionResource]bool) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	byGV := map[schema.GroupVersion][]schema.GroupVersionResource{}
	for gvr := range want {
		byGV[gvr.GroupVersion()] = append(byGV[gvr.GroupVersion()], gvr)
	}
	for gv, gvrs := range byGV {
		list, err := e.discovery.ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			if !apierrors.IsNotFound(err) {
				// Keep what was known rather than tear controllers down on a passing error.
				e.log.Warn("discovery failed", "groupVersion", gv.String(), "err", err)
				for _, gvr := range gvrs {
					out[gvr] = e.served.isServed(gvr)
				}
			}
			continue
		}
		for _, r := range list.APIResources {
			for _, gvr := range gvrs {
				if r.Name == gvr.Resource {
					out[gvr] = true
					e.served.learnKind(gv.WithKind(r.Kind), gvr)
				}
			}
		}
	}
	return out
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

// startController starts the informer, the child informers, the workers and the Run of kind k.
func (e *Engine) startController(ctx context.Context, k *Kind, wg *sync.WaitGroup) *Controller {
	c := newController(e.services, k)
	ns := e.cfg.Namespace
	if !k.Namespaced {
		ns = ""
	}
	c.inf = e.ensureInformer(ctx, k.Resource, ns, k, func(obj any) {
		c.enqueue(obj)
		e.wakeReferrers(k.Name, obj)
	})
	for _, gvr := range k.ChildResources {
		if e.served.isServed(gvr) {
			e.ensureInformer(ctx, gvr, c.childNamespace(), nil, e.enqueueOwner)
		}
	}
	// Published only once built: Synced (behind /readyz) reads c.inf of every published controller.
	e.mu.Lock()
	e.controllers[k.Controller] = c
	e.mu.Unlock()
	e.log.Info("controller started", "controller", k.Controller, "workers", e.cfg.Workers)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.run(ctx)
	}()
	if k.Run != nil {
		// A warm engine's follower reads too: what it reads is what the warm reconciles compare.
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.Run(ctx, c)
		}()
	}
	return c
}
