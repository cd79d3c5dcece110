package devenv

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"evals.si/operator/evalsi"
)

// installer writes what a development session installs. On a control plane of the session's
// own, everything is applied, and goes with the control plane. On an existing cluster (make dev
// --kubeconfig/--context), only what is missing is created, and recorded; what is there already
// is left as it is, and at the end of the session remove deletes what was created and nothing
// else.
type installer struct {
	client   dynamic.Interface
	existing bool
	out      io.Writer

	mu sync.Mutex
	// made are the objects the session created, in order.
	made []madeObject
}

// madeObject names an object the session created.
type madeObject struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

func (m madeObject) String() string {
	if m.namespace == "" {
		return m.gvr.Resource + "/" + m.name
	}
	return m.gvr.Resource + "/" + m.namespace + "/" + m.name
}

// apply writes obj, of resource gvr: applied (server-side, forced) on the session's own control
// plane; created when missing on an existing cluster. A resource just made (a CRD established a
// moment ago) may not be usable yet: it tries again for a while.
func (in *installer) apply(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	var ri dynamic.ResourceInterface = in.client.Resource(gvr)
	if ns := obj.GetNamespace(); ns != "" {
		ri = in.client.Resource(gvr).Namespace(ns)
	}
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if !in.existing {
			_, lastErr = ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "evalsi-dev", Force: true})
			return lastErr == nil, nil
		}
		_, lastErr = ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: "evalsi-dev"})
		switch {
		case apierrors.IsAlreadyExists(lastErr):
			if gvr.Resource != "namespaces" {
				fmt.Fprintf(in.out, "%s %s is there already: left as it is\n", obj.GetKind(), obj.GetName())
			}
			lastErr = nil
		case lastErr == nil:
			in.record(gvr, obj.GetNamespace(), obj.GetName())
		}
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("writing %s %s: %w", obj.GetKind(), obj.GetName(), lastErr)
	}
	return nil
}

// expect records, on an existing cluster, an object that something the session runs is about to
// create (the webhook's certificates, its configurations), unless it is there already.
func (in *installer) expect(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) error {
	if !in.existing {
		return nil
	}
	_, err := in.client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		in.record(gvr, namespace, name)
		return nil
	case err != nil:
		return fmt.Errorf("looking for %s %s: %w", gvr.Resource, name, err)
	}
	return nil
}

func (in *installer) record(gvr schema.GroupVersionResource, namespace, name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := madeObject{gvr, namespace, name}
	if !slices.Contains(in.made, m) {
		in.made = append(in.made, m)
	}
}

// remove deletes, on an existing cluster, what the session created, in two steps: first its
// evals.si objects, while the operator still runs to release their finalizers (waiting until
// they are gone, at most a minute); then, after stopServers, the rest, newest first.
func (in *installer) remove(ctx context.Context, stopServers func()) {
	if !in.existing {
		stopServers()
		return
	}
	in.mu.Lock()
	made := slices.Clone(in.made)
	in.mu.Unlock()
	slices.Reverse(made)
	var evals, rest []madeObject
	for _, m := range made {
		if m.gvr.Group == evalsi.Group {
			evals = append(evals, m)
		} else {
			rest = append(rest, m)
		}
	}
	in.delete(ctx, evals)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, m := range evals {
		wait.PollUntilContextCancel(waitCtx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := in.client.Resource(m.gvr).Namespace(m.namespace).Get(ctx, m.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	stopServers()
	in.delete(ctx, rest)
	fmt.Fprintf(in.out, "removed the %d objects this session created; nothing else was changed\n", len(made))
}

// delete deletes objs, saying which it could not.
func (in *installer) delete(ctx context.Context, objs []madeObject) {
	for _, m := range objs {
		err := in.client.Resource(m.gvr).Namespace(m.namespace).Delete(ctx, m.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(in.out, "could not delete %s: %v\n", m, err)
		}
	}
}
