package render

import (
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"evals.si/operator/unstructuredjson"
)

// This file holds the API server's rules for the spec fields that are copied into a pod
// template, written with apimachinery's validation helpers and resource.Quantity, so that a spec
// admission accepts renders children the API server takes. They follow kube-apiserver 1.37's
// core validation (ValidateResourceRequirements, ValidateTolerations, ValidateLabels,
// validateEnvVarValueFrom, validateAffinity); TestChildrenPassServerDryRun holds them to it on a
// real API server.

// check applies the container resource rules: known resource names, non-negative quantities,
// whole numbers for extended resources (GPUs), requests at most limits, and for resources that
// cannot be overcommitted (extended resources, huge pages) a limit equal to any request.
func (r Resources) check(p pointer, ps *problems) {
	parsed := map[string]map[string]resource.Quantity{}
	for _, side := range []struct {
		name string
		m    map[string]Quantity
	}{{"limits", r.Limits}, {"requests", r.Requests}} {
		parsed[side.name] = map[string]resource.Quantity{}
		for _, name := range slices.Sorted(maps.Keys(side.m)) {
			at := p.at(side.name).at(name)
			if msg := resourceNameProblem(name); msg != "" {
				ps.add(at, "%s", msg)
				continue
			}
			q, err := resource.ParseQuantity(string(side.m[name]))
			if err != nil {
				ps.add(at, "%q is not a quantity such as \"500m\", \"2\" or \"4Gi\"", side.m[name])
				continue
			}
			if q.Sign() < 0 {
				ps.add(at, "must not be negative")
				continue
			}
			if !overcommitAllowed(name) && q.MilliValue()%1000 != 0 {
				ps.add(at, "must be a whole number: %s cannot be split", name)
				continue
			}
			if page, ok := hugePageSize(name); ok && q.Value()%page.Value() != 0 {
				ps.add(at, "must be a whole number of %s pages", page.String())
				continue
			}
			parsed[side.name][name] = q
		}
	}
	hugePages, cpuOrMemory := false, false
	for _, m := range []map[string]Quantity{r.Limits, r.Requests} {
		for name := range m {
			_, huge := hugePageSize(name)
			hugePages = hugePages || huge
			cpuOrMemory = cpuOrMemory || name == "cpu" || name == "memory"
		}
	}
	if hugePages && !cpuOrMemory {
		ps.add(p, "huge pages need a cpu or memory request or limit too")
	}
	for _, name := range slices.Sorted(maps.Keys(parsed["requests"])) {
		req := parsed["requests"][name]
		limit, limited := parsed["limits"][name]
		switch {
		case !limited && !overcommitAllowed(name):
			if _, given := r.Limits[name]; !given {
				ps.add(p.at("limits").at(name), "is required: %s cannot be overcommitted, so a request needs a limit equal to it", name)
			}
		case limited && !overcommitAllowed(name) && req.Cmp(limit) != 0:
			ps.add(p.at("requests").at(name), "must equal the limit of %s (%s)", name, limit.String())
		case limited && req.Cmp(limit) > 0:
			ps.add(p.at("requests").at(name), "must not be above the limit of %s (%s)", name, limit.String())
		}
	}
}

// resourceNameProblem says what is wrong with a container resource name, or "".
func resourceNameProblem(name string) string {
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return "is not a resource name: " + strings.Join(errs, "; ")
	}
	if !strings.Contains(name, "/") {
		if _, huge := hugePageSize(name); huge || name == "cpu" || name == "memory" || name == "ephemeral-storage" {
			return ""
		}
		return "is not a container resource: use cpu, memory, ephemeral-storage, hugepages-<size> or a vendor resource such as nvidia.com/gpu"
	}
	if strings.Contains(name, "kubernetes.io/") {
		return "is not a container resource: the kubernetes.io domain has none"
	}
	if errs := validation.IsQualifiedName("requests." + name); len(errs) > 0 {
		return "is not an extended resource name: " + strings.Join(errs, "; ")
	}
	return ""
}

// hugePageSize returns the page size of a huge pages resource (hugepages-2Mi: 2Mi).
func hugePageSize(name string) (resource.Quantity, bool) {
	size, ok := strings.CutPrefix(name, corev1.ResourceHugePagesPrefix)
	if !ok {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(size)
	return q, err == nil && q.Sign() > 0
}

// overcommitAllowed reports whether a resource may be requested below its limit: only native
// resources other than huge pages.
func overcommitAllowed(name string) bool {
	return !strings.Contains(name, "/") && !strings.HasPrefix(name, corev1.ResourceHugePagesPrefix)
}

// Toleration lets a pool's pods run on nodes with matching taints, as Kubernetes takes it.
type Toleration struct {
	Key               string `json:"key,omitempty"`
	Operator          string `json:"operator,omitempty"`
	Value             string `json:"value,omitempty"`
	Effect            string `json:"effect,omitempty"`
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

// check applies the API server's toleration rules.
func (t Toleration) check(p pointer, ps *problems) {
	if t.Key != "" {
		ps.addAll(p.at("key"), validation.IsQualifiedName(t.Key))
	}
	if t.Key == "" && t.Operator != "Exists" {
		ps.add(p.at("operator"), "must be Exists when key is empty (which tolerates every taint)")
	}
	if t.TolerationSeconds != nil && t.Effect != "NoExecute" {
		ps.add(p.at("effect"), "must be NoExecute when tolerationSeconds is set")
	}
	switch t.Operator {
	case "", "Equal":
		ps.addAll(p.at("value"), validation.IsValidLabelValue(t.Value))
	case "Exists":
		if t.Value != "" {
			ps.add(p.at("value"), "must be empty when operator is Exists")
		}
	}
}

// render returns the toleration as the pod spec holds it.
func (t Toleration) render() map[string]any {
	out := map[string]any{}
	setIf(out, "key", t.Key)
	setIf(out, "operator", t.Operator)
	setIf(out, "value", t.Value)
	setIf(out, "effect", t.Effect)
	if t.TolerationSeconds != nil {
		out["tolerationSeconds"] = *t.TolerationSeconds
	}
	return out
}

// check applies the API server's rules to where a pool's pods may run.
func (s Scheduling) check(p pointer, ps *problems) {
	for _, k := range slices.Sorted(maps.Keys(s.NodeSelector)) {
		ps.addAll(p.at("nodeSelector").at(k), validation.IsQualifiedName(k))
		ps.addAll(p.at("nodeSelector").at(k), validation.IsValidLabelValue(s.NodeSelector[k]))
	}
	for i, t := range s.Tolerations {
		t.check(p.at("tolerations").index(i), ps)
	}
	if s.Affinity != nil {
		checkAffinity(p.at("affinity"), s.Affinity, ps)
	}
}

// strictly decodes v (a JSON value) into out as the API server decodes a body: a field's name
// matches only in its own case, and an unknown field is refused, named by its path. encoding/json
// matches names in any case: it took "SecretKeyRef" for secretKeyRef, so the checks passed a spec
// that, copied as it is into a child, the API server then refused on every apply.
func strictly(v any, out any) error {
	data, err := unstructuredjson.Marshal(v)
	if err != nil {
		return err
	}
	unknown, err := kjson.UnmarshalStrict(data, out, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(unknown...)
}

// checkAffinity decodes an affinity as Kubernetes' Affinity, refusing unknown fields, and applies
// the API server's rules for node selector terms, label selectors, topology keys and weights.
func checkAffinity(p pointer, raw map[string]any, ps *problems) {
	var a corev1.Affinity
	if err := strictly(raw, &a); err != nil {
		ps.add(p, "is not a Kubernetes affinity: %v", err)
		return
	}
	if na := a.NodeAffinity; na != nil {
		np := p.at("nodeAffinity")
		if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
			rp := np.at("requiredDuringSchedulingIgnoredDuringExecution")
			if len(req.NodeSelectorTerms) == 0 {
				ps.add(rp.at("nodeSelectorTerms"), "must have at least one term")
			}
			for i, term := range req.NodeSelectorTerms {
				checkNodeSelectorTerm(rp.at("nodeSelectorTerms").index(i), term, ps)
			}
		}
		for i, pref := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			pp := np.at("preferredDuringSchedulingIgnoredDuringExecution").index(i)
			checkWeight(pp.at("weight"), pref.Weight, ps)
			checkNodeSelectorTerm(pp.at("preference"), pref.Preference, ps)
		}
	}
	for _, side := range []struct {
		name string
		pa   *corev1.PodAffinity
	}{{"podAffinity", a.PodAffinity}, {"podAntiAffinity", (*corev1.PodAffinity)(a.PodAntiAffinity)}} {
		if side.pa == nil {
			continue
		}
		sp := p.at(side.name)
		for i, term := range side.pa.RequiredDuringSchedulingIgnoredDuringExecution {
			checkPodAffinityTerm(sp.at("requiredDuringSchedulingIgnoredDuringExecution").index(i), term, ps)
		}
		for i, w := range side.pa.PreferredDuringSchedulingIgnoredDuringExecution {
			wp := sp.at("preferredDuringSchedulingIgnoredDuringExecution").index(i)
			checkWeight(wp.at("weight"), w.Weight, ps)
			checkPodAffinityTerm(wp.at("podAffinityTerm"), w.PodAffinityTerm, ps)
		}
	}
}

func checkWeight(p pointer, w int32, ps *problems) {
	if w < 1 || w > 100 {
		ps.add(p, "must be from 1 to 100")
	}
}

// checkNodeSelectorTerm applies the rules of one node selector term's expressions and fields.
func checkNodeSelectorTerm(p pointer, term corev1.NodeSelectorTerm, ps *problems) {
	for i, r := range term.MatchExpressions {
		rp := p.at("matchExpressions").index(i)
		ps.addAll(rp.at("key"), validation.IsQualifiedName(r.Key))
		switch r.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
			if len(r.Values) == 0 {
				ps.add(rp.at("values"), "must have at least one value for %s", r.Operator)
			}
		case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				ps.add(rp.at("values"), "must be empty for %s", r.Operator)
			}
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
			if len(r.Values) != 1 || !wholeNumber.MatchString(r.Values[0]) {
				ps.add(rp.at("values"), "must be one whole number for %s", r.Operator)
			}
		default:
			ps.add(rp.at("operator"), "%q is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt", r.Operator)
		}
	}
	for i, r := range term.MatchFields {
		rp := p.at("matchFields").index(i)
		if r.Key != "metadata.name" {
			ps.add(rp.at("key"), "must be metadata.name, the one field a node can be selected by")
		}
		if (r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn) || len(r.Values) != 1 {
			ps.add(rp, "must be In or NotIn with exactly one node name")
		}
	}
}

var wholeNumber = regexp.MustCompile(`^-?[0-9]+$`)

// checkPodAffinityTerm applies the rules of a pod (anti-)affinity term.
func checkPodAffinityTerm(p pointer, term corev1.PodAffinityTerm, ps *problems) {
	if term.TopologyKey == "" {
		ps.add(p.at("topologyKey"), "is required (for example kubernetes.io/hostname)")
	} else {
		ps.addAll(p.at("topologyKey"), validation.IsQualifiedName(term.TopologyKey))
	}
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"labelSelector", term.LabelSelector}, {"namespaceSelector", term.NamespaceSelector}} {
		if sel.s == nil {
			continue
		}
		checkLabelSelector(p.at(sel.name), sel.s, ps)
	}
	for i, ns := range term.Namespaces {
		ps.addAll(p.at("namespaces").index(i), validation.IsDNS1123Label(ns))
	}
	for _, keys := range []struct {
		name string
		list []string
	}{{"matchLabelKeys", term.MatchLabelKeys}, {"mismatchLabelKeys", term.MismatchLabelKeys}} {
		for i, k := range keys.list {
			ps.addAll(p.at(keys.name).index(i), validation.IsQualifiedName(k))
		}
		if len(keys.list) > 0 && term.LabelSelector == nil {
			ps.add(p.at(keys.name), "needs labelSelector")
		}
	}
}

// checkLabelSelector applies apimachinery's label selector rules to sel, the field at p.
func checkLabelSelector(p pointer, sel *metav1.LabelSelector, ps *problems) {
	// The helper names fields by a path of its own; the problem is named by p instead.
	for _, e := range metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("selector")) {
		ps.add(p, "%s", strings.TrimPrefix(e.Error(), "selector."))
	}
}
