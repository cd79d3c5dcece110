// Command webhooks serves KEDA's own admission webhooks for ScaledObjects and
// TriggerAuthentications, registered as KEDA's webhooks command registers them, on a host and
// port the caller chooses.
package main

import (
	"flag"
	"os"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/kedacore/keda/v2/pkg/k8s"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to serve the webhooks on")
	port := flag.Int("port", 9443, "port to serve the webhooks on")
	certDir := flag.String("cert-dir", "", "directory of tls.crt and tls.key")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("keda-webhooks")

	s := clientgoscheme.Scheme
	utilruntime.Must(kedav1alpha1.AddToScheme(s))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 s,
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: *host, Port: *port, CertDir: *certDir}),
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	if _, _, err := k8s.InitScaleClient(mgr); err != nil {
		log.Error(err, "creating the scale client")
		os.Exit(1)
	}
	if err := (&kedav1alpha1.ScaledObject{}).SetupWebhookWithManager(mgr, false); err != nil {
		log.Error(err, "registering the ScaledObject webhook")
		os.Exit(1)
	}
	if err := (&kedav1alpha1.TriggerAuthentication{}).SetupWebhookWithManager(mgr); err != nil {
		log.Error(err, "registering the TriggerAuthentication webhook")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "serving")
		os.Exit(1)
	}
}
