package command

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/tools/clientcmd"
)

// TestKubeConfigLoadsAsKubectlDoes resolves the cluster as kubectl would: --kubeconfig, else the
// files KUBECONFIG lists (the first file's current context), else ~/.kube/config; --context
// picks another context of them.
func TestKubeConfigLoadsAsKubectlDoes(t *testing.T) {
	dir := t.TempDir()
	file := func(name, context, server string) string {
		p := filepath.Join(dir, name)
		kc := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: %[1]s
clusters: [{name: %[1]s, cluster: {server: %[2]q}}]
users: [{name: %[1]s, user: {token: t}}]
contexts: [{name: %[1]s, context: {cluster: %[1]s, user: %[1]s}}]
`, context, server)
		if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := file("a", "ctx-a", "https://a.example:6443"), file("b", "ctx-b", "https://b.example:6443")
	// ~/.kube/config, as client-go found it when it started.
	homeFile := clientcmd.RecommendedHomeFile
	clientcmd.RecommendedHomeFile = file("home", "ctx-home", "https://home.example:6443")
	t.Cleanup(func() { clientcmd.RecommendedHomeFile = homeFile })
	for name, tc := range map[string]struct {
		kubeconfigEnv string
		args          []string
		want          string
	}{
		"~/.kube/config":                    {want: "https://home.example:6443"},
		"KUBECONFIG, one file":              {kubeconfigEnv: b, want: "https://b.example:6443"},
		"KUBECONFIG, a list: the first's":   {kubeconfigEnv: a + string(os.PathListSeparator) + b, want: "https://a.example:6443"},
		"KUBECONFIG, a list, --context":     {kubeconfigEnv: a + string(os.PathListSeparator) + b, args: []string{"--context=ctx-b"}, want: "https://b.example:6443"},
		"--kubeconfig over KUBECONFIG":      {kubeconfigEnv: a, args: []string{"--kubeconfig=" + b}, want: "https://b.example:6443"},
		"--context of ~/.kube/config alone": {args: []string{"--context=ctx-home"}, want: "https://home.example:6443"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.kubeconfigEnv)
			var got string
			app := &cli.App{Flags: []cli.Flag{KubeconfigFlag(""), ContextFlag()}, Action: func(c *cli.Context) error {
				rc, err := KubeConfig(c)
				if err != nil {
					return err
				}
				got = rc.Host
				return nil
			}}
			if err := app.RunContext(context.Background(), append([]string{"x"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("server %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("an unknown context", func(t *testing.T) {
		t.Setenv("KUBECONFIG", a)
		app := &cli.App{Flags: []cli.Flag{KubeconfigFlag(""), ContextFlag()}, Action: func(c *cli.Context) error {
			_, err := KubeConfig(c)
			return err
		}}
		if err := app.RunContext(context.Background(), []string{"x", "--context=nope"}); err == nil {
			t.Error("an unknown context was accepted")
		}
	})
}
