package render

import (
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// envFieldPaths are the pod fields an environment variable can be read from.
var envFieldPaths = []string{
	"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
	"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
}

// envResources are the container resources an environment variable can be read from.
var envResources = []string{
	"limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage",
}

// envAnnotationOrLabel is a downward-API path to one label or annotation.
var envAnnotationOrLabel = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']+)'\]$`)

// checkValueFrom decodes an environment variable's valueFrom as Kubernetes' EnvVarSource,
// refusing unknown fields, and applies the API server's rules: exactly one source, valid Secret
// and ConfigMap names and keys, a supported pod field or container resource.
func checkValueFrom(p pointer, raw map[string]any, ps *problems) {
	var src corev1.EnvVarSource
	if err := strictly(raw, &src); err != nil {
		ps.add(p, "is not a Kubernetes EnvVarSource: %v", err)
		return
	}
	set := 0
	if r := src.SecretKeyRef; r != nil {
		set++
		checkKeyRef(p.at("secretKeyRef"), r.Name, r.Key, ps)
	}
	if r := src.ConfigMapKeyRef; r != nil {
		set++
		checkKeyRef(p.at("configMapKeyRef"), r.Name, r.Key, ps)
	}
	if r := src.FieldRef; r != nil {
		set++
		if r.APIVersion != "" && r.APIVersion != "v1" {
			ps.add(p.at("fieldRef").at("apiVersion"), "must be v1")
		}
		if m := envAnnotationOrLabel.FindStringSubmatch(r.FieldPath); m != nil {
			ps.addAll(p.at("fieldRef").at("fieldPath"), validation.IsQualifiedName(strings.ToLower(m[2])))
		} else if !slices.Contains(envFieldPaths, r.FieldPath) {
			ps.add(p.at("fieldRef").at("fieldPath"), "%q is not a pod field an environment variable can read, such as metadata.name or status.podIP", r.FieldPath)
		}
	}
	if r := src.ResourceFieldRef; r != nil {
		set++
		rp := p.at("resourceFieldRef")
		if !slices.Contains(envResources, r.Resource) {
			ps.add(rp.at("resource"), "%q is not one of %s", r.Resource, strings.Join(envResources, ", "))
		} else if !r.Divisor.IsZero() {
			checkDivisor(rp.at("divisor"), r.Resource, r.Divisor, ps)
		}
		if r.ContainerName != "" {
			ps.addAll(rp.at("containerName"), validation.IsDNS1123Label(r.ContainerName))
		}
	}
	if src.FileKeyRef != nil {
		ps.add(p.at("fileKeyRef"), "is not supported: use secretKeyRef or configMapKeyRef")
		set++
	}
	if set != 1 {
		ps.add(p, "must set exactly one of secretKeyRef, configMapKeyRef, fieldRef and resourceFieldRef")
	}
}

// checkKeyRef applies the rules of a Secret's or ConfigMap's name and key.
func checkKeyRef(p pointer, name, key string, ps *problems) {
	if name == "" {
		ps.add(p.at("name"), "is required")
	} else {
		ps.addAll(p.at("name"), validation.IsDNS1123Subdomain(name))
	}
	if key == "" {
		ps.add(p.at("key"), "is required")
	} else {
		ps.addAll(p.at("key"), validation.IsConfigMapKey(key))
	}
}

// checkDivisor applies the API server's divisor rule: cpu divides by 1m or 1, memory and
// ephemeral storage by a power of 1000 or 1024.
func checkDivisor(p pointer, res string, d resource.Quantity, ps *problems) {
	allowed := []string{"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"}
	if strings.HasSuffix(res, ".cpu") {
		allowed = []string{"1m", "1"}
	}
	for _, a := range allowed {
		if d.Cmp(resource.MustParse(a)) == 0 {
			return
		}
	}
	ps.add(p, "must be one of %s for %s", strings.Join(allowed, ", "), res)
}

// checkEnv applies the rules of a user's environment variables: value or valueFrom, a valid
// source, no name twice, and none of the names the operator sets (owned says which field to use
// instead, or "" when the operator sets it from the object itself).
func checkEnv(p pointer, env []EnvVar, owned map[string]string, ps *problems) {
	seen := map[string]bool{}
	for i, e := range env {
		ep := p.index(i)
		if use, ok := owned[e.Name]; ok {
			if use == "" {
				ps.add(ep.at("name"), "%s is set by the operator and cannot be overridden", e.Name)
			} else {
				ps.add(ep.at("name"), "%s is set by the operator: use %s", e.Name, use)
			}
		}
		if seen[e.Name] {
			ps.add(ep.at("name"), "%s is set twice", e.Name)
		}
		seen[e.Name] = true
		if e.Value != "" && e.ValueFrom != nil {
			ps.add(ep, "set value or valueFrom, not both")
		}
		if e.ValueFrom != nil {
			checkValueFrom(ep.at("valueFrom"), e.ValueFrom, ps)
		}
	}
}

// fixedEnv returns the names of the variables in list, for checkEnv: each maps to "" (set by
// the operator from the object).
func fixedEnv(list []EnvVar) map[string]string {
	out := make(map[string]string, len(list))
	for _, e := range list {
		out[e.Name] = ""
	}
	return out
}
