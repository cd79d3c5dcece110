package render

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
)

// The pod rung: each trial runs in a pod of its own, made by the class's launcher (a small pool
// whose account may create pods in the sandbox namespace and nothing else) from the trial shape
// the operator renders, a PodTemplate. The API server holds the launcher to that shape
// (evalsi-crds's evalsi-trial-pods policy): the trial pods of a class are its template with
// another of the class's trialImages and plain environment values, nothing added.
const (
	// GuestContainer is the trial pod's init container: it runs the platform image's
	// evalsi-guest with --install, which copies the guest into the pod's GuestDir volume, so
	// that the trial's own image needs nothing of the platform's (docs/image.md).
	GuestContainer = "evalsi-guest"
	// GuestBinary is evalsi-guest's path in the platform image; GuestDir is where the trial
	// container finds it, read-only, and runs it as its command.
	GuestBinary = "/usr/local/bin/evalsi-guest"
	GuestDir    = "/evalsi"
	// TrialContainer is the trial pod's one container: the trial's image, running the guest.
	TrialContainer = "trial"
	// LabelTrialShape marks a PodTemplate that is a pod rung class's trial shape, the parameter of
	// the evalsi-trial-pods policy.
	LabelTrialShape = evalsi.Group + "/trial-shape"
	// AnnotationTrialImages on a trial shape lists, comma-separated, the images its trials may
	// run (the class's spec.trialImages).
	AnnotationTrialImages = evalsi.Group + "/trial-images"
)

// trialShape renders a pod rung class's trial shape, the PodTemplate sandbox-<class>-trial: the
// isolation probe first (the trial's own pod, not only its launcher's, holds the pod rung's floor,
// every metadata address included), the guest copied in by an init container from the platform image, the first of trialImages running
// it, no service-account token (an account of its own, sandbox-<class>-trial, with no rights),
// the restricted security context, the class's resources and scheduling, and the labels that put
// the pod under its NetworkPolicy, sandbox-<class>-trial (DNS and the class's spec.egress alone).
func (o Owner) trialShape(name, namespace, image string, spec SandboxClassSpec) []*unstructured.Unstructured {
	account := name + "-trial"
	guest := map[string]any{"name": "evalsi-guest", "emptyDir": map[string]any{}}
	tmp, tmpMount := tmpVolume()
	trial := map[string]any{
		"name":            TrialContainer,
		"image":           spec.TrialImages[0],
		"command":         []any{GuestDir + "/evalsi-guest"},
		"args":            []any{"--class=" + o.Name},
		"securityContext": restrictedContainer(),
		"volumeMounts":    []any{map[string]any{"name": "evalsi-guest", "mountPath": GuestDir, "readOnly": true}, tmpMount},
	}
	setIf(trial, "resources", spec.Resources.render())
	pod := map[string]any{
		"serviceAccountName":           account,
		"automountServiceAccountToken": false,
		"enableServiceLinks":           false,
		"restartPolicy":                "Never",
		"securityContext":              restrictedPod(),
		"initContainers": []any{trialProbe(image, tmpMount), map[string]any{
			"name":            GuestContainer,
			"image":           image,
			"command":         []any{GuestBinary, "--install", GuestDir},
			"securityContext": restrictedContainer(),
			"volumeMounts":    []any{map[string]any{"name": "evalsi-guest", "mountPath": GuestDir}},
		}},
		"containers": []any{trial},
		"volumes":    []any{guest, tmp},
	}
	setIf(pod, "runtimeClassName", spec.RuntimeClassName)
	spec.Scheduling.apply(pod)
	labels := o.selector()
	// The class's own label (evals.si/sandboxclass) names the class a trial pod is of.
	labels[labelKind(o.Kind)], labels[evalsi.LabelComponent] = o.Name, "trial"
	shape := o.object("v1", "PodTemplate", name+"-trial", namespace, "trial", map[string]any{
		"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": pod},
	})
	shapeLabels := shape.GetLabels()
	shapeLabels[LabelTrialShape] = "true"
	shape.SetLabels(shapeLabels)
	// The shape outlives the launcher's right to make pods (launcherAccess): when the class is
	// deleted in the background, the garbage collector deletes the binding first.
	shape.SetAnnotations(map[string]string{AnnotationTrialImages: strings.Join(spec.TrialImages, ","),
		evalsi.AnnotationOutlives: "RoleBinding/" + launcherRole(name)})
	// A trial needs no evalsid (it has no token, and the launcher hands it its work): DNS and
	// what its class opens (spec.egress) alone.
	egress := appendEgress([]any{dnsEgress()}, spec.Egress)
	return []*unstructured.Unstructured{o.serviceAccount(account, namespace, "trial"), shape, o.egressPolicy(account, namespace, "trial", egress)}
}

// launcherAccess renders what lets a pod rung class's launcher (its pool, running as name) make
// trial pods: a Role in the sandbox namespace to create, watch and delete pods, read their logs
// and get the class's trial shape, and its binding; and a NetworkPolicy that lets the launcher,
// and not the trials, reach the API server: at apiServer (CIDRs) when the platform names it,
// else at any address on the API server's ports.
func (o Owner) launcherAccess(name, namespace string, apiServer []string) []*unstructured.Unstructured {
	role := launcherRole(name)
	launchers := o.selector()
	launchers[evalsi.LabelComponent] = "launcher"
	return []*unstructured.Unstructured{
		o.object("rbac.authorization.k8s.io/v1", "Role", role, namespace, "launcher", map[string]any{"rules": []any{
			map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"create", "get", "list", "watch", "delete"}},
			map[string]any{"apiGroups": []any{""}, "resources": []any{"pods/log"}, "verbs": []any{"get"}},
			map[string]any{"apiGroups": []any{""}, "resources": []any{"podtemplates"}, "resourceNames": []any{name + "-trial"}, "verbs": []any{"get"}},
		}}),
		o.object("rbac.authorization.k8s.io/v1", "RoleBinding", role, namespace, "launcher", map[string]any{
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": namespace}},
		}),
		o.object("networking.k8s.io/v1", "NetworkPolicy", role, namespace, "launcher", map[string]any{"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": launchers},
			"policyTypes": []any{"Egress"},
			"egress":      []any{apiServerEgress(apiServer)},
		}}),
	}
}

// launcherRole names the Role and RoleBinding of the launcher of the pool name.
func launcherRole(name string) string { return name + "-launcher" }

// apiServerEgress is the egress rule to the Kubernetes API server's ports, at cidrs when given.
func apiServerEgress(cidrs []string) map[string]any {
	rule := map[string]any{"ports": []any{
		map[string]any{"protocol": "TCP", "port": int64(443)},
		map[string]any{"protocol": "TCP", "port": int64(6443)},
	}}
	var to []any
	for _, c := range cidrs {
		to = append(to, map[string]any{"ipBlock": map[string]any{"cidr": c}})
	}
	setIf(rule, "to", to)
	return rule
}

// trialProbe is a trial pod's first init container: the isolation probe, confined as the trial
// is, which fails the pod (and so the trial) when the pod rung's floor is missing. Its dials wait
// a second: a trial pays that once, while a NetworkPolicy's drop of metadata times it out.
func trialProbe(image string, tmpMount map[string]any) map[string]any {
	probe := probeContainer(image, []string{"--rung=" + RungPod, "--dial-timeout=1s"}, restrictedContainer())
	probe["volumeMounts"] = []any{tmpMount}
	return probe
}
