package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// KEDA's module, the source of the ScaledObject CRD at test time.
const (
	KedaModule  = "github.com/kedacore/keda/v2"
	KedaVersion = "v2.21.0"
)

// InstallCRDs creates (or updates) the CRDs in path, a YAML file or a directory of them, and waits
// until each is Established.
func (c *Cluster) InstallCRDs(ctx context.Context, path string) error {
	crds, err := readCRDs(path)
	if err != nil {
		return err
	}
	return c.ApplyCRDs(ctx, crds)
}

// InstallKedaCRDs installs KEDA's ScaledObject and TriggerAuthentication CRDs, read from KEDA's
// Go module.
func (c *Cluster) InstallKedaCRDs(ctx context.Context) error {
	crds, err := KedaCRDs(ctx)
	if err != nil {
		return err
	}
	return c.ApplyCRDs(ctx, crds)
}

// KedaCRDs are KEDA's ScaledObject and TriggerAuthentication CRDs, read from KEDA's Go module.
func KedaCRDs(ctx context.Context) ([]*unstructured.Unstructured, error) {
	dir, err := DownloadModule(ctx, KedaModule, KedaVersion)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, crd := range []string{"keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml"} {
		crds, err := readCRDs(filepath.Join(dir, "config", "crd", "bases", crd))
		if err != nil {
			return nil, err
		}
		out = append(out, crds...)
	}
	return out, nil
}

// readCRDs decodes every CustomResourceDefinition in a YAML file or a directory of YAML files.
func readCRDs(path string) ([]*unstructured.Unstructured, error) {
	files := []string{path}
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if fi.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	var crds []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		found, err := decodeCRDs(f, data)
		if err != nil {
			return nil, err
		}
		crds = append(crds, found...)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CustomResourceDefinition in %s", path)
	}
	return crds, nil
}

// decodeCRDs returns the CustomResourceDefinitions of a YAML stream named name.
func decodeCRDs(name string, data []byte) ([]*unstructured.Unstructured, error) {
	var crds []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return crds, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", name, err)
		}
		if obj["kind"] == "CustomResourceDefinition" {
			crds = append(crds, &unstructured.Unstructured{Object: obj})
		}
	}
}

// ApplyCRDs creates or updates crds and waits until each is Established and served.
func (c *Cluster) ApplyCRDs(ctx context.Context, crds []*unstructured.Unstructured) error {
	client := c.Dynamic().Resource(crdsGVR)
	for _, crd := range crds {
		_, err := client.Create(ctx, crd, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = client.Get(ctx, crd.GetName(), getOpts); err == nil {
				crd.SetResourceVersion(cur.GetResourceVersion())
				_, err = client.Update(ctx, crd, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.GetName(), err)
		}
	}
	return c.WaitForCRDs(ctx, crds)
}

// WaitForCRDs returns once each of crds is Established and served (discovery lists it).
func (c *Cluster) WaitForCRDs(ctx context.Context, crds []*unstructured.Unstructured) error {
	client := c.Dynamic().Resource(crdsGVR)
	for _, crd := range crds {
		name := crd.GetName()
		err := c.poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
			cur, err := client.Get(ctx, name, getOpts)
			if err != nil {
				return err
			}
			if !conditionTrue(cur, "Established") {
				return fmt.Errorf("CRD %s is not Established", name)
			}
			return c.served(cur)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// served checks that discovery lists the CRD's resource, so that clients can use it at once.
func (c *Cluster) served(crd *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		name, _ := v.(map[string]any)["name"].(string)
		list, err := c.Clientset().Discovery().ServerResourcesForGroupVersion(group + "/" + name)
		if err != nil {
			return err
		}
		found := false
		for _, r := range list.APIResources {
			found = found || r.Name == plural
		}
		if !found {
			return fmt.Errorf("%s/%s %s not yet in discovery", group, name, plural)
		}
	}
	return nil
}

// UninstallCRDs deletes the CRDs named and waits until they are gone.
func (c *Cluster) UninstallCRDs(ctx context.Context, names ...string) error {
	client := c.Dynamic().Resource(crdsGVR)
	for _, n := range names {
		if err := client.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting CRD %s: %w", n, err)
		}
	}
	api := c.process("kube-apiserver")
	return api.poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		var left []string
		for _, n := range names {
			if _, err := client.Get(ctx, n, getOpts); !apierrors.IsNotFound(err) {
				left = append(left, n)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("CRDs still present: %s", strings.Join(left, ", "))
		}
		return nil
	})
}
