package chart_test

import (
	"context"
	"fmt"

	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
)

// impersonate returns a dynamic client acting as user.
func impersonate(user string, groups ...string) dynamic.Interface {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	return dynamic.NewForConfigOrDie(cfg)
}

// activeNamespace creates namespace n (with labels), waiting out an earlier test's deletion of it.
func activeNamespace(t *testing.T, ctx context.Context, n string, labels map[string]string) {
	t.Helper()
	cs := env.Clientset()
	clustertest.Eventually(t, ctx, "namespace "+n+" active", func() error {
		ns := namespace(n)
		ns.Labels = labels
		got, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = cs.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
		}
		if err == nil && got.Status.Phase == corev1.NamespaceTerminating {
			err = fmt.Errorf("terminating")
		}
		return err
	})
}

// grant binds users to a Role in ns with rules.
func grant(t *testing.T, ctx context.Context, ns, name string, rules []rbacv1.PolicyRule, users ...string) {
	t.Helper()
	cs := env.Clientset()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, user := range users {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + strings.ReplaceAll(user, ":", "-"), Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

var (
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	rcsGVR         = schema.GroupVersionResource{Version: "v1", Resource: "replicationcontrollers"}
	jobsGVR        = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	cronJobsGVR    = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}
	secretsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	servicesGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	managedByEvals = map[string]any{"app.kubernetes.io/managed-by": "evalsi"}
)

// restrictedPod is a pod spec as the operator renders an Evaluator's: its own service account,
// no API token, an evalsid token, and a restricted container. change edits it (pod, container).
func restrictedPod(change func(pod, container map[string]any)) map[string]any {
	container := map[string]any{"name": "c", "image": "x", "securityContext": map[string]any{
		"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}}}}
	pod := map[string]any{
		"serviceAccountName":           "judge-evaluator",
		"automountServiceAccountToken": false,
		"securityContext":              map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
		"containers":                   []any{container},
		"volumes": []any{map[string]any{"name": "evalsi-token", "projected": map[string]any{"sources": []any{
			map[string]any{"serviceAccountToken": map[string]any{"audience": "evalsi", "path": "token"}}}}}},
	}
	if change != nil {
		change(pod, container)
	}
	return pod
}

// workload wraps a pod spec in an object of kind, labelled with labels.
func workload(kind, name string, labels map[string]any, pod map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name}
	if labels != nil {
		meta["labels"] = labels
	}
	tmpl := map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": name}}, "spec": pod}
	var spec map[string]any
	apiVersion := "apps/v1"
	switch kind {
	case "Pod":
		apiVersion, spec = "v1", pod
	case "ReplicationController":
		apiVersion, spec = "v1", map[string]any{"selector": map[string]any{"app": name}, "template": tmpl}
	case "Job":
		pod["restartPolicy"] = "Never"
		apiVersion, spec = "batch/v1", map[string]any{"template": tmpl}
	case "CronJob":
		pod["restartPolicy"] = "Never"
		apiVersion, spec = "batch/v1", map[string]any{"schedule": "@hourly", "jobTemplate": map[string]any{"spec": map[string]any{"template": tmpl}}}
	default:
		spec = map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": name}}, "template": tmpl}
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta, "spec": spec}}
}

// poolOf labels w's pods as the pods of the pool of kind (evaluator, checkpointserver,
// sandboxclass) named instance, as the operator renders them.
func poolOf(kind, instance string, w *unstructured.Unstructured) *unstructured.Unstructured {
	labels := w.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)
	labels["app.kubernetes.io/name"], labels["app.kubernetes.io/instance"] = kind, instance
	return w
}

// TestFenceHoldsOperatorServiceAccounts impersonates the service accounts of the operator and of
// the webhook, which RBAC here allows to write and delete every kind that makes pods, so that only
// the charts' ValidatingAdmissionPolicies stand between them and what the policies forbid: each
// case is denied with the policy's message, and the same templates pass where a sandbox rung
// needs them.
func TestFenceHoldsOperatorServiceAccounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	needCluster(t)
	// A sandbox namespace of the test's own: the install guide's evalsi-sandboxd makes the usual one.
	ns, sandbox := "vap-test", "vap-sandbox"
	helm(t, "upgrade", "--install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+env.Kubeconfig, "--set", "webhook.enabled=false", "--set", "webhook.dryRunChildren.enabled=true",
		"--set", "sandboxNamespace="+sandbox)
	t.Cleanup(func() { installCRDsChart(t) })
	operator := "system:serviceaccount:" + ns + ":evalsi-operator"
	sandboxd := "system:serviceaccount:evalsi-system:evalsi-sandboxd"
	webhookSA := "system:serviceaccount:evalsi-system:evalsi-webhook"
	writeAll := []rbacv1.PolicyRule{
		{APIGroups: []string{"", "apps", "batch"}, Resources: []string{"pods", "pods/ephemeralcontainers", "replicationcontrollers", "deployments", "jobs", "cronjobs", "secrets", "services"},
			Verbs: []string{"get", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"create"}},
	}
	// What evalsi-sandboxd holds to grant pod rung launchers theirs (RBAC's escalation check).
	launcherRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log", "podtemplates"}, Verbs: []string{"get"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"create"}},
	}
	for _, n := range []string{ns, sandbox} {
		activeNamespace(t, ctx, n, nil)
		grant(t, ctx, n, "writer", writeAll, operator, sandboxd, webhookSA, "platform-admin")
		grant(t, ctx, n, "launcher-granter", launcherRules, sandboxd)
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "judge-evaluator", Namespace: n}}
		if _, err := env.Clientset().CoreV1().ServiceAccounts(n).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	op, sbd, wh, other := impersonate(operator), impersonate(sandboxd), impersonate(webhookSA), impersonate("platform-admin")
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	try := func(c dynamic.Interface, gvr schema.GroupVersionResource, n string, obj *unstructured.Unstructured) error {
		_, err := c.Resource(gvr).Namespace(n).Create(ctx, obj, dry)
		return err
	}
	deploy := func(name string, change func(pod, container map[string]any)) *unstructured.Unstructured {
		return workload("Deployment", name, managedByEvals, restrictedPod(change))
	}
	// Objects that someone else made, without the label, for the operator to delete or take.
	theirs := map[schema.GroupVersionResource]*unstructured.Unstructured{
		deploymentsGVR: workload("Deployment", "theirs", nil, restrictedPod(nil)),
		secretsGVR:     {Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "theirs"}}},
		servicesGVR: {Object: map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "theirs"},
			"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}},
	}
	for gvr, obj := range theirs {
		if _, err := other.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// A pod of the operator's own, for the ephemeral-container case.
	mine := workload("Pod", "mine", managedByEvals, restrictedPod(nil))
	if _, err := other.Resource(podsGVR).Namespace(ns).Create(ctx, mine, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	del := func(gvr schema.GroupVersionResource) error {
		return op.Resource(gvr).Namespace(ns).Delete(ctx, "theirs", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	tokenSecret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
		"metadata": map[string]any{"name": "sa-token", "labels": managedByEvals,
			"annotations": map[string]any{"kubernetes.io/service-account.name": "default"}},
	}}
	privileged := func(_, c map[string]any) { c["securityContext"] = map[string]any{"privileged": true} }
	addsCaps := func(_, c map[string]any) {
		c["securityContext"].(map[string]any)["capabilities"] = map[string]any{"drop": []any{"ALL"}, "add": []any{"NET_ADMIN"}}
	}
	bubblewrap := func(pod, c map[string]any) {
		c["args"] = []any{"--rung=bubblewrap", "--class=bwrap"}
		c["securityContext"] = map[string]any{"privileged": true}
		delete(pod, "securityContext")
	}
	sandboxPool := map[string]any{"app.kubernetes.io/managed-by": "evalsi", "app.kubernetes.io/name": "sandboxclass"}
	// In force once the policies (not RBAC, whose new bindings take a moment) refuse a probe,
	// and their version of this upgrade once they admit what only its sandbox namespace allows.
	clustertest.Eventually(t, ctx, "policies in force", func() error {
		err := try(op, deploymentsGVR, ns, workload("Deployment", "probe", nil, restrictedPod(nil)))
		if err == nil || !strings.Contains(err.Error(), "evalsi-operator-limits") {
			return fmt.Errorf("a probe of evalsi-operator-limits gave %v", err)
		}
		_, err = wh.Resource(deploymentsGVR).Namespace(ns).Create(ctx, deploy("probe", nil), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "evalsi-webhook-dry-run-only") {
			wh.Resource(deploymentsGVR).Namespace(ns).Delete(ctx, "probe", metav1.DeleteOptions{})
			return fmt.Errorf("a probe of evalsi-webhook-dry-run-only gave %v", err)
		}
		if err := try(sbd, deploymentsGVR, sandbox, workload("Deployment", "probe-bwrap", sandboxPool, restrictedPod(bubblewrap))); err != nil {
			return fmt.Errorf("a privileged bubblewrap pool in %s, the upgrade's sandbox namespace: %v", sandbox, err)
		}
		return nil
	})
	// Requests made once the policies are in force (a request before then is admitted).
	_, hijack := op.Resource(deploymentsGVR).Namespace(ns).Patch(ctx, "theirs", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"evalsi"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	_, debug := op.Resource(podsGVR).Namespace(ns).Patch(ctx, "mine", types.StrategicMergePatchType,
		[]byte(`{"spec":{"ephemeralContainers":[{"name":"debug","image":"busybox","securityContext":{"privileged":true}}]}}`),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "ephemeralcontainers")
	tokenRequest := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"metadata": map[string]any{"name": "judge-evaluator"}, "spec": map[string]any{"audiences": []any{"evalsi"}}}}
	_, token := op.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace(ns).
		Create(ctx, tokenRequest, dry, "token")
	const unlabelled = "creates, updates and deletes only objects labelled app.kubernetes.io/managed-by: evalsi"
	const volumesAllowed = "mount only emptyDir, persistentVolumeClaim and projected volumes of service-account tokens, of the ca.crt of a Secret the platform names (evalsid-ca, evalsi-operator-tls) and of their own certificate from the platform's signer (evals.si/workload)"
	// caSource projects the keys of Secret name, as a pool's evalsid CA is projected.
	caSource := func(name string, keys ...string) map[string]any {
		items := []any{}
		for _, k := range keys {
			items = append(items, map[string]any{"key": k, "path": k})
		}
		return map[string]any{"projected": map[string]any{"sources": []any{map[string]any{"secret": map[string]any{"name": name, "items": items}}}}}
	}
	volume := func(name string, source map[string]any) *unstructured.Unstructured {
		return deploy("vol-"+name, func(p, _ map[string]any) {
			source["name"] = name
			p["volumes"] = append(p["volumes"].([]any), source)
		})
	}
	securityContext := func(name string, pod bool, fields map[string]any) *unstructured.Unstructured {
		return deploy(name, func(p, c map[string]any) {
			sc := c["securityContext"].(map[string]any)
			if pod {
				sc = p["securityContext"].(map[string]any)
			}
			for k, v := range fields {
				sc[k] = v
			}
		})
	}
	unconfinedByAnnotation := deploy("apparmor-annotation", nil)
	unconfinedByAnnotation.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"] =
		map[string]any{"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
	networkPolicy := func(name string, selects map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "evalsi",
				"app.kubernetes.io/name": "evaluator", "app.kubernetes.io/instance": "judge"}},
			"spec": map[string]any{"podSelector": map[string]any{"matchLabels": selects}, "policyTypes": []any{"Ingress"}}}}
	}
	networkPoliciesGVR := schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	rolesGVR := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	roleBindingsGVR := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	// launcherRole is class's launcher's Role, named name, with extra rules.
	launcherRole := func(class, name string, extra ...any) *unstructured.Unstructured {
		rules := []any{
			map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"create", "get", "list", "watch", "delete"}},
			map[string]any{"apiGroups": []any{""}, "resources": []any{"pods/log"}, "verbs": []any{"get"}},
			map[string]any{"apiGroups": []any{""}, "resources": []any{"podtemplates"}, "resourceNames": []any{"sandbox-" + class + "-trial"}, "verbs": []any{"get"}},
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
			"metadata": map[string]any{"name": name, "labels": managedByEvals}, "rules": append(rules, extra...)}}
	}
	launcherBinding := func(account string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
			"metadata": map[string]any{"name": "sandbox-x-launcher", "labels": managedByEvals},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sandbox-x-launcher"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": account, "namespace": sandbox}}}}
	}
	// The Role a launcher's binding names, made by an administrator (a binding's escalation check
	// reads it).
	if _, err := env.Dynamic().Resource(rolesGVR).Namespace(sandbox).Create(ctx, launcherRole("x", "sandbox-x-launcher"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	launcherPool := func(component string) *unstructured.Unstructured {
		w := poolOf("sandboxclass", "x", workload("Deployment", "sandbox-x", sandboxPool, restrictedPod(func(p, _ map[string]any) {
			p["serviceAccountName"] = "sandbox-x"
			p["automountServiceAccountToken"] = true
		})))
		w.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)["app.kubernetes.io/component"] = component
		return w
	}
	for _, c := range []struct {
		what string
		err  error
		want string
	}{
		{"unlabelled Deployment", try(op, deploymentsGVR, ns, workload("Deployment", "plain", nil, restrictedPod(nil))), unlabelled},
		{"deleting an unlabelled Deployment", del(deploymentsGVR), unlabelled},
		{"deleting an unlabelled Secret", del(secretsGVR), unlabelled},
		{"deleting an unlabelled Service", del(servicesGVR), unlabelled},
		{"labelling someone else's Deployment", hijack, unlabelled},
		{"running as the operator's account", try(op, deploymentsGVR, ns, deploy("as-op", func(p, _ map[string]any) { p["serviceAccountName"] = "evalsi-operator" })), "never run as one of the platform's service accounts"},
		{"running as the webhook's account", try(op, deploymentsGVR, ns, deploy("as-wh", func(p, _ map[string]any) { p["serviceAccountName"] = "evalsi-webhook" })), "never run as one of the platform's service accounts"},
		{"mounting an API token", try(op, deploymentsGVR, ns, deploy("automount", func(p, _ map[string]any) { delete(p, "automountServiceAccountToken") })), "mount no Kubernetes API token"},
		{"a token for the API server", try(op, deploymentsGVR, ns, deploy("apitoken", func(p, _ map[string]any) {
			p["volumes"] = []any{map[string]any{"name": "t", "projected": map[string]any{"sources": []any{map[string]any{"serviceAccountToken": map[string]any{"path": "token"}}}}}}
		})), "project service-account tokens only for evalsid's audiences"},
		{"host network", try(op, deploymentsGVR, ns, deploy("hostnet", func(p, _ map[string]any) { p["hostNetwork"] = true })), "no host network, PID or IPC namespace"},
		{"host PID in the sandbox namespace", try(sbd, deploymentsGVR, sandbox, deploy("hostpid", func(p, _ map[string]any) { p["hostPID"] = true })), "no host network, PID or IPC namespace"},
		{"host path", try(op, deploymentsGVR, ns, deploy("hostpath", func(p, _ map[string]any) {
			p["volumes"] = []any{map[string]any{"name": "root", "hostPath": map[string]any{"path": "/"}}}
		})), volumesAllowed},
		{"host path in the sandbox namespace", try(sbd, deploymentsGVR, sandbox, workload("Deployment", "hostpath", sandboxPool, restrictedPod(func(p, c map[string]any) {
			bubblewrap(p, c)
			p["volumes"] = []any{map[string]any{"name": "root", "hostPath": map[string]any{"path": "/"}}}
		}))), volumesAllowed},
		{"host port", try(op, deploymentsGVR, ns, deploy("hostport", func(_, c map[string]any) {
			c["ports"] = []any{map[string]any{"containerPort": int64(80), "hostPort": int64(80)}}
		})), "use no host port"},
		{"sysctls", try(op, deploymentsGVR, ns, deploy("sysctl", func(p, _ map[string]any) {
			p["securityContext"].(map[string]any)["sysctls"] = []any{map[string]any{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}}
		})), "set no sysctls"},
		{"privileged pod template", try(op, deploymentsGVR, ns, deploy("priv", privileged)), "runs no privileged container"},
		{"privileged in the sandbox namespace, not bubblewrap", try(sbd, deploymentsGVR, sandbox, workload("Deployment", "landlock", sandboxPool, restrictedPod(privileged))), "runs no privileged container"},
		{"bubblewrap outside the sandbox namespace", try(sbd, deploymentsGVR, ns, workload("Deployment", "bwrap", sandboxPool, restrictedPod(bubblewrap))), "runs no privileged container"},
		{"added capabilities", try(op, deploymentsGVR, ns, deploy("caps", addsCaps)), "drop ALL capabilities and add none"},
		{"privilege escalation", try(op, deploymentsGVR, ns, deploy("esc", func(_, c map[string]any) { delete(c["securityContext"].(map[string]any), "allowPrivilegeEscalation") })), "allowPrivilegeEscalation: false"},
		{"no seccomp profile", try(op, deploymentsGVR, ns, deploy("seccomp", func(p, _ map[string]any) { delete(p, "securityContext") })), "RuntimeDefault seccomp profile"},
		{"a privileged Pod", try(op, podsGVR, ns, workload("Pod", "pod", managedByEvals, restrictedPod(privileged))), "runs no privileged container"},
		{"a privileged Job", try(op, jobsGVR, ns, workload("Job", "job", managedByEvals, restrictedPod(privileged))), "runs no privileged container"},
		{"a CronJob as the operator", try(op, cronJobsGVR, ns, workload("CronJob", "cron", managedByEvals, restrictedPod(func(p, _ map[string]any) { p["serviceAccountName"] = "evalsi-operator" }))), "never run as one of the platform's service accounts"},
		{"a ReplicationController with a host path", try(op, rcsGVR, ns, workload("ReplicationController", "rc", managedByEvals, restrictedPod(func(p, _ map[string]any) {
			p["volumes"] = []any{map[string]any{"name": "root", "hostPath": map[string]any{"path": "/"}}}
		}))), volumesAllowed},
		{"the namespace's default account", try(op, deploymentsGVR, ns, deploy("as-default", func(p, _ map[string]any) { p["serviceAccountName"] = "default" })), "never the namespace's default account"},
		{"no account named", try(op, deploymentsGVR, ns, deploy("no-sa", func(p, _ map[string]any) { delete(p, "serviceAccountName") })), "never the namespace's default account"},
		{"an NFS volume", try(op, deploymentsGVR, ns, volume("nfs", map[string]any{"nfs": map[string]any{"server": "10.0.0.1", "path": "/"}})), volumesAllowed},
		{"an iSCSI volume", try(op, deploymentsGVR, ns, volume("iscsi", map[string]any{"iscsi": map[string]any{"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": int64(0)}})), volumesAllowed},
		{"a CSI volume", try(op, deploymentsGVR, ns, volume("csi", map[string]any{"csi": map[string]any{"driver": "secrets-store.csi.k8s.io"}})), volumesAllowed},
		{"an image volume", try(op, deploymentsGVR, ns, volume("image", map[string]any{"image": map[string]any{"reference": "evil/tools:1"}})), volumesAllowed},
		{"a Secret volume", try(op, deploymentsGVR, ns, volume("secret", map[string]any{"secret": map[string]any{"secretName": "db"}})), volumesAllowed},
		{"a Secret in a projected volume", try(op, deploymentsGVR, ns, volume("projected", map[string]any{"projected": map[string]any{"sources": []any{map[string]any{"secret": map[string]any{"name": "db"}}}}})), volumesAllowed},
		{"another Secret's ca.crt", try(op, deploymentsGVR, ns, volume("other-ca", caSource("db", "ca.crt"))), volumesAllowed},
		{"the CA Secret's other keys", try(op, deploymentsGVR, ns, volume("ca-key", caSource("evalsid-ca", "ca.crt", "tls.key"))), volumesAllowed},
		{"a certificate of another signer", try(op, deploymentsGVR, ns, volume("other-signer", map[string]any{"projected": map[string]any{"sources": []any{
			map[string]any{"podCertificate": map[string]any{"signerName": "example.com/anything", "keyType": "ECDSAP256", "credentialBundlePath": "credentials.pem"}}}}})), volumesAllowed},
		{"the whole CA Secret", try(op, deploymentsGVR, ns, volume("ca-whole", map[string]any{"projected": map[string]any{"sources": []any{map[string]any{"secret": map[string]any{"name": "evalsid-ca"}}}}})), volumesAllowed},
		{"AppArmor unconfined (pod)", try(op, deploymentsGVR, ns, securityContext("apparmor-pod", true, map[string]any{"appArmorProfile": map[string]any{"type": "Unconfined"}})), "never run AppArmor unconfined"},
		{"AppArmor unconfined (container)", try(op, deploymentsGVR, ns, securityContext("apparmor-c", false, map[string]any{"appArmorProfile": map[string]any{"type": "Unconfined"}})), "never run AppArmor unconfined"},
		{"AppArmor unconfined (annotation)", try(op, deploymentsGVR, ns, unconfinedByAnnotation), "never run AppArmor unconfined"},
		{"SELinux spc_t", try(op, deploymentsGVR, ns, securityContext("selinux-type", false, map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}})), "set no SELinux user or role"},
		{"SELinux user", try(op, deploymentsGVR, ns, securityContext("selinux-user", true, map[string]any{"seLinuxOptions": map[string]any{"user": "system_u"}})), "set no SELinux user or role"},
		{"a NetworkPolicy selecting every pod", try(op, networkPoliciesGVR, ns, networkPolicy("everyone", map[string]any{})), "select only their owner's pods"},
		{"a NetworkPolicy selecting another owner's pods", try(op, networkPoliciesGVR, ns, networkPolicy("other", map[string]any{
			"app.kubernetes.io/name": "evaluator", "app.kubernetes.io/instance": "someone-else"})), "select only their owner's pods"},
		{"tolerating every taint (a control-plane node)", try(op, deploymentsGVR, ns, deploy("tolerate-all", func(p, _ map[string]any) {
			p["tolerations"] = []any{map[string]any{"operator": "Exists"}}
		})), "tolerate only the taints the platform lists"},
		{"tolerating the control plane's taint", try(op, deploymentsGVR, ns, deploy("tolerate-cp", func(p, _ map[string]any) {
			p["tolerations"] = []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}}
		})), "tolerate only the taints the platform lists"},
		{"the GPU taint with any effect", try(op, deploymentsGVR, ns, deploy("tolerate-gpu-any", func(p, _ map[string]any) {
			p["tolerations"] = []any{map[string]any{"key": "nvidia.com/gpu", "operator": "Exists"}}
		})), "tolerate only the taints the platform lists"},
		{"selecting a control-plane node", try(op, deploymentsGVR, ns, deploy("select-cp", func(p, _ map[string]any) {
			p["nodeSelector"] = map[string]any{"node-role.kubernetes.io/control-plane": ""}
		})), "select only the node labels the platform lists"},
		{"requiring a control-plane node by affinity", try(op, deploymentsGVR, ns, deploy("affinity-cp", func(p, _ map[string]any) {
			p["affinity"] = map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
				"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}}}}}}}
		})), "require only node labels the platform lists"},
		{"a CheckpointServer's pods as another pool's account", try(op, deploymentsGVR, ns, poolOf("checkpointserver", "qwen", deploy("qwen-vllm", nil))),
			"runs a checkpointserver's pods only as the service account it makes for it, qwen-vllm"},
		{"a SandboxClass's pods as a pool's account", try(sbd, deploymentsGVR, sandbox, poolOf("sandboxclass", "landlock", workload("Deployment", "sandbox-landlock", sandboxPool, restrictedPod(nil)))),
			"runs a sandboxclass's pods only as the service account it makes for it, sandbox-landlock"},
		{"a Role that is no launcher's", try(sbd, rolesGVR, sandbox, launcherRole("x", "reader")), "writes Roles and RoleBindings only for pod rung launchers"},
		{"a launcher's Role outside the sandbox namespace", try(sbd, rolesGVR, ns, launcherRole("x", "sandbox-x-launcher")), "writes Roles and RoleBindings only for pod rung launchers"},
		{"a launcher's Role that also reads Secrets", try(sbd, rolesGVR, sandbox, launcherRole("x", "sandbox-x-launcher",
			map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get"}})), "a launcher's Role lets it create, watch and delete pods"},
		{"a launcher's RoleBinding to another account", try(sbd, roleBindingsGVR, sandbox, launcherBinding("evalsi-sandboxd")), "binds its Role to the class's pool account alone"},
		{"a class pool, not a launcher, with an API token", try(sbd, deploymentsGVR, sandbox, launcherPool("sandbox")), "mount no Kubernetes API token"},
		{"a privileged ephemeral container", debug, "runs no privileged container"},
		{"a token request", token, "requests no service-account tokens"},
		{"service-account token Secret", try(op, secretsGVR, ns, tokenSecret), "makes no service-account token Secrets"},
		{"the webhook writing a Deployment for real", func() error {
			_, err := wh.Resource(deploymentsGVR).Namespace(ns).Create(ctx, deploy("real", nil), metav1.CreateOptions{})
			return err
		}(), "evalsi-webhook writes workloads only as dry runs"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want denial with %q", c.what, c.err, c.want)
		}
	}
	userns := func(pod, c map[string]any) {
		c["args"] = []any{"--rung=bubblewrap", "--class=bwrap-userns"}
		c["securityContext"] = map[string]any{"privileged": false, "allowPrivilegeEscalation": false, "procMount": "Unmasked",
			"capabilities": map[string]any{"drop": []any{"ALL"}, "add": []any{"SETUID", "SETGID", "SYS_ADMIN", "SYS_CHROOT"}}}
		pod["securityContext"] = map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}}
		pod["hostUsers"] = false
	}
	for what, err := range map[string]error{
		"the operator's restricted Deployment": try(op, deploymentsGVR, ns, deploy("good", nil)),
		"a pool with evalsid's CA beside its token": try(op, deploymentsGVR, ns, deploy("with-ca", func(p, _ map[string]any) {
			p["volumes"] = []any{map[string]any{"name": "evalsi-token", "projected": map[string]any{"sources": []any{
				map[string]any{"serviceAccountToken": map[string]any{"audience": "evalsi", "path": "token"}},
				map[string]any{"secret": map[string]any{"name": "evalsid-ca", "items": []any{map[string]any{"key": "ca.crt", "path": "ca.crt"}}}}}}}}
		})),
		"a pool with its own certificate beside its token": try(op, deploymentsGVR, ns, deploy("with-certificate", func(p, _ map[string]any) {
			p["volumes"] = []any{map[string]any{"name": "evalsi-token", "projected": map[string]any{"sources": []any{
				map[string]any{"serviceAccountToken": map[string]any{"audience": "evalsi", "path": "token"}},
				map[string]any{"podCertificate": map[string]any{"signerName": "evals.si/workload", "keyType": "ECDSAP256", "credentialBundlePath": "credentials.pem"}}}}}}
		})),
		"a CheckpointServer's Deployment": try(op, deploymentsGVR, ns, deploy("vllm", func(p, _ map[string]any) {
			p["serviceAccountName"] = "vllm"
			p["volumes"] = []any{
				map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory"}},
				map[string]any{"name": "checkpoints", "persistentVolumeClaim": map[string]any{"claimName": "ckpt", "readOnly": true}}}
		})),
		"a CheckpointServer's pods as its own account": try(op, deploymentsGVR, ns, poolOf("checkpointserver", "qwen", deploy("qwen-own", func(p, _ map[string]any) {
			p["serviceAccountName"] = "qwen-vllm"
		}))),
		"the GPU toleration the platform lists": try(op, deploymentsGVR, ns, deploy("tolerate-gpu", func(p, _ map[string]any) {
			p["tolerations"] = []any{map[string]any{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}
		})),
		"a launcher's Role":             try(sbd, rolesGVR, sandbox, launcherRole("y", "sandbox-y-launcher")),
		"a launcher's RoleBinding":      try(sbd, roleBindingsGVR, sandbox, launcherBinding("sandbox-x")),
		"a launcher with its API token": try(sbd, deploymentsGVR, sandbox, launcherPool("launcher")),
		"a SandboxClass pool following its class's tolerations": try(sbd, deploymentsGVR, sandbox, workload("Deployment", "tolerant-class", sandboxPool, restrictedPod(func(p, _ map[string]any) {
			p["tolerations"] = []any{map[string]any{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}}
		}))),
		"a pool's NetworkPolicy":                          try(op, networkPoliciesGVR, ns, networkPolicy("judge", map[string]any{"app.kubernetes.io/name": "evaluator", "app.kubernetes.io/instance": "judge"})),
		"SELinux container_t":                             try(op, deploymentsGVR, ns, securityContext("selinux-ok", false, map[string]any{"seLinuxOptions": map[string]any{"type": "container_t"}})),
		"a restricted Job":                                try(op, jobsGVR, ns, workload("Job", "good-job", managedByEvals, restrictedPod(nil))),
		"a privileged bubblewrap pool in the sandbox":     try(sbd, deploymentsGVR, sandbox, workload("Deployment", "bwrap", sandboxPool, restrictedPod(bubblewrap))),
		"a user-namespace bubblewrap pool in the sandbox": try(sbd, deploymentsGVR, sandbox, workload("Deployment", "bwrap-userns", sandboxPool, restrictedPod(userns))),
		"another user's unlabelled privileged pod":        try(other, deploymentsGVR, ns, workload("Deployment", "someone-else", nil, restrictedPod(privileged))),
		"the webhook's dry run":                           try(wh, deploymentsGVR, ns, deploy("dry", nil)),
		"another user deleting an unlabelled Secret":      other.Resource(secretsGVR).Namespace(ns).Delete(ctx, "theirs", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}),
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
}
