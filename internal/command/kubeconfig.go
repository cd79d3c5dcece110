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

// KubeconfigFlag is the --kubeconfig flag of the commands that talk to a cluster (also read from
// KUBECONFIG); what is the usage's note on what the cluster is for, or "".
func KubeconfigFlag(what string) cli.Flag {
	usage := "kubeconfig file (default: in-cluster configuration)"
	if what != "" {
		usage += ", " + what
	}
	return &cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: usage}
}

// KubeConfig loads a kubeconfig file, or the in-cluster configuration when path is empty.
func KubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	return rc, nil
}
