package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/cluster"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/checkout"
	"evals.si/operator/render"
)

// TestMakeDevOnAnExistingCluster types README's `make dev DEV_ARGS='--kubeconfig FILE'` against
// a control plane the session did not start (the project's, as an existing cluster would be),
// which already holds a namespace of someone's with a ConfigMap and one of the evals.si CRDs. The
// examples become Ready; after Ctrl-C the session has removed what it created (the other CRDs,
// KEDA's, the admission policies and webhook configurations, the namespaces it made) and left what
// was there.
func TestMakeDevOnAnExistingCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	preexisting := filepath.Join(root, "chart/evalsi-crds/files/crds/tracesources.yaml")
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 1, NodeCapacity: map[string]string{"nvidia.com/gpu": "8"},
		CRDDirs: []string{preexisting}, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	kube := c.Clientset()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "someones"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps("someones").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	run, ready := makeDev(t, "DEV_ARGS=--kubeconfig "+c.Kubeconfig)
	run.Until(ctx, "every example Ready", ready)
	// The session's admission holds specs to the operator's limits, as a real install's webhook
	// does (--max-pool-replicas of both).
	_, tooMany := c.Dynamic().Resource(evalsi.Evaluators).Namespace("team-a").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "too-many", "namespace": "team-a"},
		"spec":     map[string]any{"replicas": int64(render.DefaultMaxPoolReplicas + 1)},
	}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	run.Interrupt()
	if want := "the platform allows at most 100 per pool"; tooMany == nil || !strings.Contains(tooMany.Error(), want) {
		t.Errorf("an Evaluator past the operator's replica limit: admission answered %v, want a refusal saying %q", tooMany, want)
	}
	run.Has("using the existing cluster at", "CustomResourceDefinition tracesources.evals.si is there already: left as it is", "removed the")

	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	gone := func(gvr schema.GroupVersionResource, namespace, name string) bool {
		o, err := c.Dynamic().Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && o.GetDeletionTimestamp() != nil
	}
	admission := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: r}
	}
	for _, o := range []struct {
		gvr             schema.GroupVersionResource
		namespace, name string
	}{
		{crds, "", "evaluators.evals.si"},
		{crds, "", "scaledobjects.keda.sh"},
		{admission("validatingwebhookconfigurations"), "", "evalsi-dev-validation"},
		{admission("mutatingwebhookconfigurations"), "", "evalsi-dev-creator"},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", "evalsi-system"},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", "team-a"},
	} {
		if !gone(o.gvr, o.namespace, o.name) {
			t.Errorf("%s %s is still there after the session", o.gvr.Resource, o.name)
		}
	}
	policies, err := c.Dynamic().Resource(admission("validatingadmissionpolicies")).List(ctx, metav1.ListOptions{})
	if err != nil || len(policies.Items) != 0 {
		t.Errorf("admission policies after the session: %d (%v), want none", len(policies.Items), err)
	}
	for _, o := range []struct {
		gvr             schema.GroupVersionResource
		namespace, name string
	}{
		{crds, "", "tracesources.evals.si"},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", "someones"},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "someones", "settings"},
	} {
		if gone(o.gvr, o.namespace, o.name) {
			t.Errorf("%s %s, there before the session, is gone", o.gvr.Resource, o.name)
		}
	}
}
