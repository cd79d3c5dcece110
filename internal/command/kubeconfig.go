// Package command holds what the commands of evalsi-operator and evalsi-dev share: their common
// flags and how each is read into what a package takes, exit codes, and reading manifests. Each
// command's own file only wires these and its own flags to a package.
package command

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeconfigFlag is the --kubeconfig flag of the commands that talk to a cluster, as kubectl's
// (default: KUBECONFIG, a list of files as kubectl reads it, else ~/.kube/config, else the
// in-cluster configuration); what is the usage's note on what the cluster is for, or "".
func KubeconfigFlag(what string) cli.Flag {
	usage := "kubeconfig file (default: KUBECONFIG, else ~/.kube/config, else the in-cluster configuration)"
	if what != "" {
		usage += ", " + what
	}
	return &cli.StringFlag{Name: "kubeconfig", Usage: usage}
}

// ContextFlag is the --context flag that goes with KubeconfigFlag.
func ContextFlag() cli.Flag {
	return &cli.StringFlag{Name: "context", Usage: "the kubeconfig context to use (default: its current context)"}
}

// KubeConfig loads the configuration KubeconfigFlag and ContextFlag name, with client-go's loading rules (kubectl's):
// --kubeconfig, else the files KUBECONFIG lists, else ~/.kube/config, else the in-cluster
// configuration; --context picks a context of it.
func KubeConfig(c *cli.Context) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.String("kubeconfig")
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.String("context")}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config or in-cluster): %w", err)
	}
	return rc, nil
}
