package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeAdmissionConfig writes the API server's AdmissionConfiguration, which makes it present
// its webhook client certificate to every admission webhook ("*" in the kubeconfig it names), as
// a cluster whose webhooks authenticate the API server does; it returns the file's path.
func writeAdmissionConfig(dir string, p certFiles) (string, error) {
	kubeconfig := filepath.Join(dir, "webhook-client.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: %s
      client-key: %s
`, p.WebhookClientCert, p.WebhookClientKey)), 0o600); err != nil {
		return "", err
	}
	plugin := func(name string) string {
		return fmt.Sprintf(`  - name: %s
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: %s
`, name, kubeconfig)
	}
	config := filepath.Join(dir, "admission.yaml")
	body := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" +
		plugin("ValidatingAdmissionWebhook") + plugin("MutatingAdmissionWebhook")
	return config, os.WriteFile(config, []byte(body), 0o600)
}
