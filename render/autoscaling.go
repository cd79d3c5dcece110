package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/apiclient/evalsiv1/evalsiv1connect"
)

// Autoscaling scales a pool with KEDA on its queue depth in evalsid.
type Autoscaling struct {
	MinReplicas      *int32    `json:"minReplicas,omitempty"`
	MaxReplicas      int32     `json:"maxReplicas"`
	IdleReplicas     *int32    `json:"idleReplicas,omitempty"`
	TargetQueueDepth int32     `json:"targetQueueDepth,omitempty"`
	PollingInterval  string    `json:"pollingInterval,omitempty"`
	CooldownPeriod   string    `json:"cooldownPeriod,omitempty"`
	Fallback         *Fallback `json:"fallback,omitempty"`
}

// Fallback is the replica count KEDA keeps when the queue depth cannot be read.
type Fallback struct {
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
	Replicas         int32 `json:"replicas"`
}

// Defaults of an autoscaling block.
const (
	defaultTargetQueueDepth = 10
	defaultFailureThreshold = 3
)

// check applies the rules KEDA holds a ScaledObject to, and what the operator needs to render
// one: minReplicas at most maxReplicas, idleReplicas below minReplicas (KEDA reads a missing
// minReplicas as 0, so idleReplicas needs one), whole seconds for the intervals.
func (a *Autoscaling) check(p pointer, ps *problems) {
	if a.MinReplicas != nil && *a.MinReplicas > a.MaxReplicas {
		ps.add(p.at("minReplicas"), "minReplicas must not be above maxReplicas")
	}
	if a.IdleReplicas != nil {
		switch {
		case a.MinReplicas == nil:
			ps.add(p.at("idleReplicas"), "idleReplicas needs minReplicas above it (KEDA reads a missing minReplicas as 0)")
		case *a.IdleReplicas >= *a.MinReplicas:
			ps.add(p.at("idleReplicas"), "idleReplicas must be below minReplicas")
		}
	}
	for field, d := range map[string]string{"pollingInterval": a.PollingInterval, "cooldownPeriod": a.CooldownPeriod} {
		if _, ok := seconds(d); d != "" && !ok {
			ps.add(p.at(field), "%q is not a whole number of seconds such as \"30s\" or \"5m\"", d)
		}
	}
}

// checkReplicaLimit refuses replica counts above limit (0: none), each on its own field.
func checkReplicaLimit(replicas *int32, a *Autoscaling, limit int32, ps *problems) {
	if limit <= 0 {
		return
	}
	over := func(p pointer, n int32) {
		if n > limit {
			ps.add(p, "%d replicas: the platform allows at most %d per pool", n, limit)
		}
	}
	if replicas != nil {
		over(specPointer.at("replicas"), *replicas)
	}
	if a == nil {
		return
	}
	at := specPointer.at("autoscaling")
	over(at.at("maxReplicas"), a.MaxReplicas)
	if a.MinReplicas != nil {
		over(at.at("minReplicas"), *a.MinReplicas)
	}
	if a.Fallback != nil {
		over(at.at("fallback").at("replicas"), a.Fallback.Replicas)
	}
}

// checkReplicas applies the rule of a pool that may set a fixed count or autoscaling.
func checkReplicas(replicas *int32, a *Autoscaling, ps *problems) {
	if replicas != nil && a != nil {
		ps.add(specPointer, "set replicas or autoscaling, not both")
	}
	if a != nil {
		a.check(specPointer.at("autoscaling"), ps)
	}
}

// scaledObject renders KEDA's ScaledObject for the Deployment named target, scaling on the queue
// depth that evalsid serves at queueURL, read with the credentials of the TriggerAuthentication
// of the same name, or, when the platform names one (Options.KEDAAuthentication), of its
// ClusterTriggerAuthentication: the platform's queue reader's token and certificate.
func (o Owner) scaledObject(a *Autoscaling, target, namespace, component, queueURL, clusterAuthentication string) *unstructured.Unstructured {
	spec := map[string]any{
		"scaleTargetRef":  map[string]any{"name": target},
		"maxReplicaCount": int64(a.MaxReplicas),
	}
	if a.MinReplicas != nil {
		spec["minReplicaCount"] = int64(*a.MinReplicas)
	}
	if a.IdleReplicas != nil {
		spec["idleReplicaCount"] = int64(*a.IdleReplicas)
	}
	for field, d := range map[string]string{"pollingInterval": a.PollingInterval, "cooldownPeriod": a.CooldownPeriod} {
		if secs, ok := seconds(d); ok {
			spec[field] = secs
		}
	}
	if f := a.Fallback; f != nil {
		threshold := f.FailureThreshold
		if threshold == 0 {
			threshold = defaultFailureThreshold
		}
		spec["fallback"] = map[string]any{"failureThreshold": int64(threshold), "replicas": int64(f.Replicas)}
	}
	depth := a.TargetQueueDepth
	if depth == 0 {
		depth = defaultTargetQueueDepth
	}
	authMode, authRef := "bearer", map[string]any{"name": target}
	if clusterAuthentication != "" {
		authMode, authRef = "tls,bearer", map[string]any{"name": clusterAuthentication, "kind": "ClusterTriggerAuthentication"}
	}
	spec["triggers"] = []any{map[string]any{
		"type": "metrics-api",
		"metadata": map[string]any{
			"url":           queueURL,
			"format":        "json",
			"valueLocation": queueDepthField,
			"targetValue":   strconv.Itoa(int(depth)),
			"authMode":      authMode,
		},
		"authenticationRef": authRef,
	}}
	return o.object("keda.sh/v1alpha1", "ScaledObject", target, namespace, component, map[string]any{"spec": spec})
}

// triggerAuthentication renders the credentials KEDA reads a pool's queue with: a token it mints
// for the namespace's QueueReaderServiceAccount (the "token" parameter of the bearer auth mode).
func (o Owner) triggerAuthentication(name, namespace, component string) *unstructured.Unstructured {
	return o.object("keda.sh/v1alpha1", "TriggerAuthentication", name, namespace, component, map[string]any{"spec": map[string]any{
		"boundServiceAccountToken": []any{map[string]any{"parameter": "token", "serviceAccountName": QueueReaderServiceAccount}},
	}})
}

// queueDepthField is the JSON name of GetQueueDepthResponse.depth, where KEDA reads the value.
var queueDepthField = (&evalsiv1.GetQueueDepthResponse{}).ProtoReflect().Descriptor().Fields().ByNumber(1).JSONName()

// queueURL is the URL of evalsid's GetQueueDepth call for one pool in Connect's GET form, as
// apiclient/proto/evalsi/v1/queue.proto defines it: the request as compact JSON in the query.
// project and namespace are an Evaluator's, both "" for a SandboxClass's shared pool.
func queueURL(api, project, namespace string, kind evalsiv1.PoolKind, name string) string {
	msg, err := protojson.Marshal(&evalsiv1.GetQueueDepthRequest{Project: project, Namespace: namespace, Kind: kind, Name: name})
	if err != nil {
		panic(fmt.Sprintf("encoding a queue-depth request: %v", err)) // strings and an enum always encode
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, msg); err != nil {
		panic(fmt.Sprintf("compacting a queue-depth request: %v", err))
	}
	q := url.Values{"connect": {"v1"}, "encoding": {"json"}, "message": {compact.String()}}
	return strings.TrimSuffix(api, "/") + evalsiv1connect.QueueServiceGetQueueDepthProcedure + "?" + q.Encode()
}

// seconds parses a duration such as "30s" or "5m" into whole seconds; false when d is not a
// positive whole number of seconds.
func seconds(d string) (int64, bool) {
	v, err := time.ParseDuration(d)
	if err != nil || v <= 0 || v%time.Second != 0 {
		return 0, false
	}
	return int64(v / time.Second), true
}

// fixedReplicas is the replica count of a pool that nothing scales: spec.replicas, else the
// autoscaling minimum (at least 1), else 1.
func fixedReplicas(replicas *int32, a *Autoscaling) int32 {
	switch {
	case replicas != nil:
		return *replicas
	case a != nil && a.MinReplicas != nil && *a.MinReplicas > 0:
		return *a.MinReplicas
	default:
		return 1
	}
}

// pool renders a pool's Deployment, running as the service account sa (rendered too unless the
// spec named its own), its NetworkPolicy (egress to DNS, evalsid and the spec's rules, nothing
// in), and, when autoscaling is set and KEDA is served, the ScaledObject that owns its replicas
// (the Deployment then has none) with its TriggerAuthentication (none when the platform's
// ClusterTriggerAuthentication signs KEDA in). It fills in p's Autoscaled,
// AutoscalingUnavailable and Replicas.
func (o Owner) pool(p *Pool, component string, replicas *int32, a *Autoscaling, opts Options, queueURL, sa string, ownSA bool, pod map[string]any, egress []EgressRule) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	if ownSA {
		objs = append(objs, o.serviceAccount(sa, p.Namespace, component))
	}
	if a != nil && opts.Autoscaling {
		p.Autoscaled = true
		objs = append(objs,
			o.deployment(p.Deployment, p.Namespace, component, nil, "", pod),
			o.scaledObject(a, p.Deployment, p.Namespace, component, queueURL, opts.KEDAAuthentication),
		)
		if opts.KEDAAuthentication == "" {
			objs = append(objs, o.triggerAuthentication(p.Deployment, p.Namespace, component))
		}
	} else {
		p.AutoscalingUnavailable = a != nil
		p.Replicas = fixedReplicas(replicas, a)
		objs = append(objs, o.deployment(p.Deployment, p.Namespace, component, &p.Replicas, "", pod))
	}
	return append(objs, o.networkPolicy(p.Deployment, p.Namespace, component, egress, opts))
}

// platformImage is a pool's image: the spec's, else the operator's default.
func platformImage(image string, opts Options) (string, error) {
	if image == "" {
		image = opts.DefaultImage
	}
	if image == "" {
		return "", fmt.Errorf("spec.image: required (the operator has no --default-image)")
	}
	return image, nil
}
