// Command peer is the benchmark's yardstick: the Evaluator controller written the way the
// kubebuilder book teaches, on controller-runtime, doing the job `evalsi-operator run
// --controllers=evaluator` does. It renders each Evaluator with the operator's own render
// package, applies every child with server-side apply on every reconcile, and writes the status
// when it changed. It is its own Go module so that controller-runtime never enters the operator's.
package main

import (
	"flag"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

func main() {
	var (
		namespace, metricsAddr, pprofAddr string
		defaultImage, apiURL              string
		workers, burst                    int
		qps                               float64
	)
	// The defaults are the operator's own: 32 workers (controller-runtime's default is 1, which
	// no one would run 2,000 pools with) and 200 QPS with a burst of 400 (controller-runtime's own
	// default is no client-side limit at all, leaning on the API server's priority and fairness).
	flag.StringVar(&namespace, "namespace", "", "watch and write only this namespace (default: all)")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "address of /metrics (0 disables)")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "address of /debug/pprof (0 disables)")
	flag.StringVar(&defaultImage, "default-image", "evalsi/platform:latest", "platform image of Evaluators that name none")
	flag.StringVar(&apiURL, "api-url", "http://evalsid:8080", "evalsid's base URL")
	flag.IntVar(&workers, "workers", 32, "concurrent reconciles")
	flag.Float64Var(&qps, "kube-api-qps", 200, "steady requests per second to the Kubernetes API (-1: no client-side limit)")
	flag.IntVar(&burst, "kube-api-burst", 400, "burst of requests to the Kubernetes API")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("peer")

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgrOpts := ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		PprofBindAddress:       pprofAddr,
		HealthProbeBindAddress: "0",
	}
	if namespace != "" {
		mgrOpts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	r := &EvaluatorReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor(fieldOwner), Render: render.Options{
		DefaultImage:     defaultImage,
		VLLMImage:        render.DefaultVLLMImage,
		SandboxNamespace: "evalsi-sandbox",
		APIURL:           strings.TrimRight(apiURL, "/"),
		TokenAudience:    render.DefaultTokenAudience,
		Autoscaling:      true,
		// A controller-runtime operator's typed spec is checked where it is written (the CRD's
		// schema or an admission webhook), not at every reconcile; the operator checks it once a
		// generation.
		SpecChecked: true,
	}}
	err = ctrl.NewControllerManagedBy(mgr).
		For(object(evalsi.Evaluators.GroupVersion().WithKind("Evaluator"))).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(object(evalsi.ScaledObjects.GroupVersion().WithKind("ScaledObject"))).
		Owns(object(evalsi.TriggerAuthentications.GroupVersion().WithKind("TriggerAuthentication"))).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("evaluator").
		Complete(r)
	if err != nil {
		log.Error(err, "creating the controller")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}

// object is an empty unstructured object of a kind, for the builder.
func object(gvk schema.GroupVersionKind) client.Object {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}
