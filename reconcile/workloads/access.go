package workloads

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

// ClassRefusal returns the Ready condition of an object in namespace that names the SandboxClass
// class when it may not use it (classRefusal), or nil; nil for no class. The class is read from
// the SandboxClass controller's cache when it runs here, else from the API server. EvalRuns share
// it.
func (o Options) ClassRefusal(ctx context.Context, c *engine.Controller, namespace, class string) *engine.Condition {
	if class == "" {
		return nil
	}
	obj, err := c.Lookup(ctx, evalsi.SandboxClasses, "", class)
	var labels map[string]string
	if o.NamespaceLabels != nil {
		labels = o.NamespaceLabels(namespace)
	}
	return classRefusal(namespace, class, obj, err, labels)
}

// accountRefusal returns the Ready condition of an Evaluator whose spec names a service account
// not opened to pools (serviceAccountRefusal), or nil. Admission refuses such an Evaluator; this
// holds where admission did not run, and when the account's label is removed later.
func accountRefusal(ctx context.Context, c *engine.Controller, obj *unstructured.Unstructured) *engine.Condition {
	name := stringAt(obj, "spec", "serviceAccountName")
	if name == "" {
		return nil
	}
	sa, err := c.Kube().CoreV1().ServiceAccounts(obj.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	return serviceAccountRefusal(obj.GetNamespace(), name, sa, err)
}
