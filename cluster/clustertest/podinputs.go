package clustertest

// What a pod the test kubelet starts reads: its service account's token, its volumes and its
// environment.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"evals.si/operator/cluster"
)

// TokenKubeconfig returns a client configuration that authenticates with a token minted by
// TokenRequest for the service account namespace/name, and a kubeconfig file holding it.
func TokenKubeconfig(t testing.TB, ctx context.Context, c *cluster.Cluster, namespace, name string) (*rest.Config, string) {
	t.Helper()
	cfg, path, err := tokenKubeconfig(ctx, c, t.TempDir(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

func tokenKubeconfig(ctx context.Context, c *cluster.Cluster, dir, namespace, name string) (*rest.Config, string, error) {
	tr, err := c.Clientset().CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("minting a token for %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthority: c.Config.CAFile}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	kc.CurrentContext = "c"
	path := filepath.Join(dir, namespace+"-"+name+".kubeconfig")
	return cfg, path, clientcmd.WriteToFile(*kc, path)
}

// writeVolume writes the volume called name of the pod spec into dir.
func (k *Kubelet) writeVolume(ctx context.Context, namespace string, spec corev1.PodSpec, name, dir string) error {
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil {
		return fmt.Errorf("the pod mounts volume %q, which it does not declare", name)
	}
	cs := k.c.Clientset()
	write := func(path string, data []byte) error {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, data, 0o600)
	}
	writeKeys := func(data map[string][]byte, items []corev1.KeyToPath) error {
		if len(items) == 0 {
			for key, v := range data {
				if err := write(key, v); err != nil {
					return err
				}
			}
			return nil
		}
		for _, it := range items {
			if err := write(it.Path, data[it.Key]); err != nil {
				return err
			}
		}
		return nil
	}
	secret := func(name string) (map[string][]byte, error) {
		s, err := cs.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		return s.Data, nil
	}
	configMap := func(name string) (map[string][]byte, error) {
		cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		data := map[string][]byte{}
		for key, v := range cm.Data {
			data[key] = []byte(v)
		}
		return data, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	switch {
	case vol.Secret != nil:
		data, err := secret(vol.Secret.SecretName)
		if err != nil {
			return err
		}
		return writeKeys(data, vol.Secret.Items)
	case vol.ConfigMap != nil:
		data, err := configMap(vol.ConfigMap.Name)
		if err != nil {
			return err
		}
		return writeKeys(data, vol.ConfigMap.Items)
	case vol.EmptyDir != nil:
		return nil
	case vol.Projected != nil:
		for _, src := range vol.Projected.Sources {
			var data map[string][]byte
			var items []corev1.KeyToPath
			var err error
			switch {
			case src.ServiceAccountToken != nil:
				st := src.ServiceAccountToken
				var aud []string
				if st.Audience != "" {
					aud = []string{st.Audience}
				}
				tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, spec.ServiceAccountName, &authenticationv1.TokenRequest{
					Spec: authenticationv1.TokenRequestSpec{Audiences: aud, ExpirationSeconds: st.ExpirationSeconds},
				}, metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("volume %s: minting the projected token: %w", vol.Name, err)
				}
				data, items = map[string][]byte{st.Path: []byte(tr.Status.Token)}, nil
			case src.Secret != nil:
				data, err = secret(src.Secret.Name)
				items = src.Secret.Items
			case src.ConfigMap != nil:
				data, err = configMap(src.ConfigMap.Name)
				items = src.ConfigMap.Items
			case src.ClusterTrustBundle != nil && src.ClusterTrustBundle.SignerName != nil:
				// As the kubelet: every bundle of the signer, one after another.
				list, err := cs.CertificatesV1().ClusterTrustBundles().List(ctx, metav1.ListOptions{
					FieldSelector: "spec.signerName=" + *src.ClusterTrustBundle.SignerName})
				if err != nil {
					return fmt.Errorf("volume %s: %w", vol.Name, err)
				}
				var pem []byte
				for _, b := range list.Items {
					pem = append(pem, b.Spec.TrustBundle...)
				}
				if len(pem) == 0 {
					return fmt.Errorf("volume %s: no ClusterTrustBundle of signer %s", vol.Name, *src.ClusterTrustBundle.SignerName)
				}
				data = map[string][]byte{src.ClusterTrustBundle.Path: pem}
			default:
				return fmt.Errorf("volume %s: a projected source the harness does not write", vol.Name)
			}
			if err != nil {
				return err
			}
			if err := writeKeys(data, items); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("volume %s: a kind the harness does not write", vol.Name)
}

// envValue resolves one environment variable of a container.
func (k *Kubelet) envValue(ctx context.Context, namespace, podName string, e corev1.EnvVar) (string, error) {
	switch {
	case e.ValueFrom == nil:
		return e.Value, nil
	case e.ValueFrom.FieldRef != nil:
		switch e.ValueFrom.FieldRef.FieldPath {
		case "metadata.namespace":
			return namespace, nil
		case "metadata.name":
			return podName, nil
		}
	case e.ValueFrom.SecretKeyRef != nil:
		ref := e.ValueFrom.SecretKeyRef
		s, err := k.c.Clientset().CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("env %s: %w", e.Name, err)
		}
		return string(s.Data[ref.Key]), nil
	}
	return "", fmt.Errorf("env %s: a source the harness does not resolve", e.Name)
}
