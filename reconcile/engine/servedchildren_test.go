package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/reconcile/engine/cached"
)

// sameChild compares Children field by field, the interned and unexported ones included.
var sameChild = cmp.Exporter(func(reflect.Type) bool { return true })

var (
	deploymentsGVR     = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	servicesGVR        = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	serviceAccountsGVR = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
)

// The engine reads built-in children as protobuf. On the real API server, a Deployment, a
// Service and a ServiceAccount applied by the operator read as protobuf are the Children they
// read as JSON; a list of them holds Children of the list's kind; a watch of them gives the
// change another manager makes; and a refusal asked in protobuf reads as its Status.
func TestChildrenReadAsProtobufAreTheJSONChildren(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn := c.Dynamic()
	ns := "served-children"
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Apply(ctx, ns,
		object("v1", "Namespace", "", ns, nil), metav1.ApplyOptions{FieldManager: "test"}); err != nil {
		t.Fatal(err)
	}
	owner, err := dyn.Resource(configMaps).Namespace(ns).Apply(ctx, "owner", object("v1", "ConfigMap", ns, "owner", nil), metav1.ApplyOptions{FieldManager: "test"})
	if err != nil {
		t.Fatal(err)
	}
	child := func(apiVersion, kind string, rest map[string]any) *unstructured.Unstructured {
		u := object(apiVersion, kind, ns, "pool", rest)
		u.SetLabels(map[string]string{evalsi.LabelManagedBy: evalsi.ManagedBy})
		u.SetAnnotations(map[string]string{evalsi.AnnotationSpecHash: "h1"})
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.GetUID(), Controller: new(true)}})
		return u
	}
	children := map[schema.GroupVersionResource]*unstructured.Unstructured{
		deploymentsGVR: child("apps/v1", "Deployment", map[string]any{"spec": map[string]any{
			"replicas": int64(2),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "pool"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "pool"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "example.invalid/c"}}},
			},
		}}),
		servicesGVR: child("v1", "Service", map[string]any{"spec": map[string]any{
			"selector": map[string]any{"app": "pool"},
			"ports":    []any{map[string]any{"name": "http", "port": int64(80)}},
		}}),
		serviceAccountsGVR: child("v1", "ServiceAccount", nil),
	}
	for gvr, u := range children {
		if _, err := dyn.Resource(gvr).Namespace(ns).Apply(ctx, "pool", u, metav1.ApplyOptions{FieldManager: engine.FieldManager, Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	// The Deployment's status is the controller-manager's; wait for its counts.
	clustertest.Eventually(t, ctx, "the Deployment's status", func() error {
		d, err := dyn.Resource(deploymentsGVR).Namespace(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n, _, _ := unstructured.NestedInt64(d.Object, "status", "replicas"); n != 2 {
			return fmt.Errorf("status.replicas %d", n)
		}
		return nil
	})

	rc, err := rest.UnversionedRESTClientFor(engine.ChildRESTConfig(c.Config))
	if err != nil {
		t.Fatal(err)
	}
	get := func(gvr schema.GroupVersionResource, accept string) ([]byte, any) {
		t.Helper()
		raw, err := rc.Get().AbsPath(cached.ResourcePath(gvr, ns), "pool").SetHeader("Accept", accept).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		child, err := cached.Form(raw, true)
		if err != nil {
			t.Fatal(err)
		}
		return raw, child
	}
	// served reads gvr's child both ways until both reads see one version (the
	// controller-manager may write between them), and returns the protobuf one.
	served := func(gvr schema.GroupVersionResource) any {
		t.Helper()
		var diff string
		for range 20 {
			raw, fromProtobuf := get(gvr, "application/vnd.kubernetes.protobuf")
			if !bytes.HasPrefix(raw, []byte("k8s\x00")) {
				t.Fatalf("%s was not served as protobuf: %.40q", gvr.Resource, raw)
			}
			_, fromJSON := get(gvr, "application/json")
			if diff = cmp.Diff(fromJSON, fromProtobuf, sameChild); diff == "" {
				return fromProtobuf
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s as protobuf against JSON (-json +protobuf):\n%s", gvr.Resource, diff)
		return nil
	}
	for gvr := range children {
		served(gvr)
	}

	lw := cached.ChildListWatch(rc, deploymentsGVR, ns, evalsi.LabelManagedBy+"="+evalsi.ManagedBy)
	list, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil || len(items) != 1 {
		t.Fatalf("the list holds %d Deployments, want 1 (%v)", len(items), err)
	}
	if kind := items[0].GetObjectKind().GroupVersionKind(); kind != deploymentsGVR.GroupVersion().WithKind("Deployment") {
		t.Errorf("a listed Deployment is a %v", kind)
	}
	listMeta, _ := list.(metav1.ListInterface)
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: listMeta.GetResourceVersion(), AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	patch := object("apps/v1", "Deployment", ns, "pool", nil)
	patch.SetAnnotations(map[string]string{"example.com/touched": "yes"})
	changed, err := dyn.Resource(deploymentsGVR).Namespace(ns).Apply(ctx, "pool", patch, metav1.ApplyOptions{FieldManager: "someone-else"})
	if err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the change")
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", apierrors.FromObject(ev.Object))
			}
			m, ok := ev.Object.(metav1.Object)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			seen = m.GetResourceVersion() == changed.GetResourceVersion()
			if seen && m.GetAnnotations() != nil {
				t.Errorf("a watched child kept annotations it does not read: %v", m.GetAnnotations())
			}
		case <-ctx.Done():
			t.Fatal("no watch event of the change")
		}
	}

	// A refusal comes back in protobuf too, and reads as the API server's Status: what apply
	// tells a terminal refusal (Invalid, naming the field) from a retry by.
	err = rc.Get().AbsPath(cached.ResourcePath(deploymentsGVR, ns), "missing").SetHeader("Accept", cached.AcceptChild).Do(ctx).Error()
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `"missing" not found`) {
		t.Errorf("getting a missing Deployment: %v, want NotFound naming it", err)
	}
	invalid := child("apps/v1", "Deployment", map[string]any{"spec": map[string]any{"replicas": int64(-1)}})
	body, err := invalid.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	err = rc.Patch(types.ApplyPatchType).AbsPath(cached.ResourcePath(deploymentsGVR, ns), "pool").Param("fieldManager", engine.FieldManager).
		Param("force", "true").SetHeader("Accept", cached.AcceptChild).Body(body).Do(ctx).Error()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.replicas") {
		t.Errorf("applying a negative replica count: %v, want Invalid naming spec.replicas", err)
	}
}

// object is an unstructured object of apiVersion and kind named name in namespace, with the
// top-level fields of rest.
func object(apiVersion, kind, namespace, name string, rest map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range rest {
		u.Object[k] = v
	}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	return u
}
