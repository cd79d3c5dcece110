// Package render holds the pure functions that turn an evals.si object into the Kubernetes objects
// the operator applies for it. Nothing here reads a clock, the environment, a client or randomness:
// the controller, the `render` command and the golden tests call the same functions and get the
// same objects, field for field.
package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/schemas"
	"evals.si/operator/unstructuredjson"
)

// DefaultVLLMImage is the image of CheckpointServers that name none, unless the operator is told
// another (--vllm-image); its arguments are what the golden files check.
const DefaultVLLMImage = "vllm/vllm-openai:v0.11.0"

// Options are the operator-wide settings that rendering depends on.
type Options struct {
	// DefaultImage is the platform image, used by Evaluators and SandboxClasses without an image.
	DefaultImage string
	// VLLMImage is the image of CheckpointServers without an image.
	VLLMImage string
	// SandboxNamespace is where SandboxClass pools run.
	SandboxNamespace string
	// APIURL is evalsid's base URL, given to workers and to KEDA's queue-depth trigger.
	APIURL string
	// APICASecret is the Secret, in each pool's namespace, whose ca.crt verifies an https evalsid
	// signed by a private CA: pool pods find it at APICAFile, beside their token. Empty: the
	// image's system roots.
	APICASecret string
	// WorkloadSigner, when set, is the signer of pool pods' client certificates for evalsid: a
	// podCertificate projection beside their token (ClientCredentialsFile), which the kubelet
	// asks the signer for and renews. Empty: pools present their token alone.
	WorkloadSigner string
	// KEDAAuthentication, when set, is the ClusterTriggerAuthentication KEDA reads every pool's
	// queue with: the platform's queue reader's token and client certificate (mutual TLS with
	// evalsid), instead of a TriggerAuthentication per pool minting the namespace's queue reader's
	// token alone.
	KEDAAuthentication string
	// APIPeers are the NetworkPolicy peers (maps as Kubernetes takes them) through which pools
	// reach evalsid; empty, they are read from APIURL (apiEgress), which an evalsid outside the
	// cluster does not allow (CheckAPIEgress).
	APIPeers []any
	// APIPort is the port evalsid's pods serve on, the only one pools may reach them on; 0: the
	// URL's port.
	APIPort int32
	// KubernetesAPICIDRs are the Kubernetes API server's endpoint addresses, the only ones a pod
	// rung launcher may reach on 443 and 6443; empty: any address on those ports.
	KubernetesAPICIDRs []string
	// TokenAudience is the audience of the projected tokens pool pods present to evalsid
	// (DefaultTokenAudience when empty).
	TokenAudience string
	// Autoscaling reports whether KEDA's ScaledObject and TriggerAuthentication are served;
	// without them, pools run fixed replicas.
	Autoscaling bool
	// Limits are what the platform decides specs are held to.
	Limits
	// SpecChecked says the object's spec has passed its kind's JSON schema in its current
	// generation (the engine checks a workload's spec once a generation, Request.SpecChecked):
	// rendering then only decodes it, still refusing unknown fields. It covers the object
	// rendered, not the SandboxClass an Evaluator reads.
	SpecChecked bool
}

// DefaultMaxPoolReplicas is the bound on an Evaluator's replicas unless the platform sets another.
const DefaultMaxPoolReplicas = 100

// Limits are the platform's decisions that a spec is checked against besides its own rules,
// alike in admission, `validate` and the reconcilers.
type Limits struct {
	// ProjectBindings are the namespaces a cluster administrator bound to a project other than
	// their own name (the Namespace's evals.si/project label), by namespace. Nil means they are
	// not known (offline): an object's project label is then taken as given.
	ProjectBindings map[string]string
	// MaxPoolReplicas bounds an Evaluator's replicas (spec.replicas and every replica count of
	// spec.autoscaling), so that whoever may write Evaluators cannot ask for unbounded pods; 0 is
	// no bound.
	MaxPoolReplicas int32
}

// Owner identifies the evals.si object that children are rendered for.
type Owner struct {
	Kind      string
	Name      string
	Namespace string // empty for cluster-scoped kinds
}

// OwnerOf returns the owner identity of obj.
func OwnerOf(obj *unstructured.Unstructured) Owner {
	return Owner{Kind: obj.GetKind(), Name: obj.GetName(), Namespace: obj.GetNamespace()}
}

// labelKind returns the label key that names an owner of kind on its children: evals.si/<kind>.
func labelKind(kind string) string {
	return evalsi.Group + "/" + strings.ToLower(kind)
}

// labels returns the labels every child of o carries; component says what the child is.
func (o Owner) labels(component string) map[string]any {
	return map[string]any{
		evalsi.LabelManagedBy: evalsi.ManagedBy,
		evalsi.LabelName:      strings.ToLower(o.Kind),
		evalsi.LabelInstance:  o.Name,
		evalsi.LabelComponent: component,
		labelKind(o.Kind):     o.Name,
	}
}

// selector returns the labels that select o's pods: stable across spec changes.
func (o Owner) selector() map[string]any {
	return map[string]any{evalsi.LabelName: strings.ToLower(o.Kind), evalsi.LabelInstance: o.Name}
}

// object returns a child of o with apiVersion, kind, metadata (name, namespace and the labels
// that say what it is) and the given spec fields: a bare object, which engine.StampChild makes
// the owner's child.
func (o Owner) object(apiVersion, kind, name, namespace, component string, fields map[string]any) *unstructured.Unstructured {
	labels := o.labels(component)
	// The engine's to stamp on the object (its pods keep it, for NetworkPolicies to select).
	delete(labels, evalsi.LabelManagedBy)
	meta := map[string]any{"name": name, "labels": labels}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	for k, v := range fields {
		obj[k] = v
	}
	return &unstructured.Unstructured{Object: obj}
}

// decodeSpec checks obj's spec against its kind's JSON schema, then decodes it into out (the
// kind's Go type), refusing unknown fields. The schema and the Go type describe the same fields
// (TestSchemasMatchGoTypes), so a spec the schema accepts always decodes; every refusal is
// schemas.Errors naming the field.
func decodeSpec(obj *unstructured.Unstructured, out any) error {
	if err := schemas.Validate(obj); err != nil {
		return err
	}
	return decodeCheckedSpec(obj, out)
}

// decodeSpec decodes the spec of the object being rendered: checked against its schema unless
// the caller has checked it in this generation (SpecChecked).
func (o Options) decodeSpec(obj *unstructured.Unstructured, out any) error {
	if o.SpecChecked {
		return decodeCheckedSpec(obj, out)
	}
	return decodeSpec(obj, out)
}

// decodeCheckedSpec decodes obj's spec, which its schema has accepted, into out, refusing
// unknown fields.
func decodeCheckedSpec(obj *unstructured.Unstructured, out any) error {
	data, err := unstructuredjson.Marshal(obj.Object["spec"])
	if err != nil {
		return err
	}
	// The schema has checked every name in its own case, so encoding/json, which matches names
	// in any case, reads the spec as the schema does (and in less time than a case-sensitive
	// decoder). The parts the schema leaves free, affinity and valueFrom, are decoded in their
	// own case where they are checked (strictly).
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return schemas.Errors{{Pointer: string(specPointer), Message: describeJSONError(err).Error()}}
	}
	return nil
}

// describeJSONError turns encoding/json's errors into ones that name the field as a path.
func describeJSONError(err error) error {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Errorf("%s: expected %s, got %s", te.Field, te.Type, te.Value)
	}
	return err
}

// Quantity is a resource quantity written as a string ("500m", "4Gi") or a number (2).
type Quantity string

// UnmarshalJSON accepts a string or a number, as Kubernetes does.
func (q *Quantity) UnmarshalJSON(data []byte) error {
	var n json.Number
	if err := json.Unmarshal(data, &n); err == nil {
		*q = Quantity(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("a quantity is a string such as \"500m\" or a number")
	}
	*q = Quantity(s)
	return nil
}

// quantities returns a resource map with every quantity in canonical form, so that the applied
// value equals what the API server stores and steady state needs no write. The quantities were
// checked (Resources.check); one that does not parse is left out.
func quantities(in map[string]Quantity) map[string]any {
	out := make(map[string]any, len(in))
	for name, v := range in {
		if q, err := resource.ParseQuantity(string(v)); err == nil {
			out[name] = q.String()
		}
	}
	return out
}

// Resources are a container's requests and limits.
type Resources struct {
	Requests map[string]Quantity `json:"requests,omitempty"`
	Limits   map[string]Quantity `json:"limits,omitempty"`
}

// render returns the container resources field (empty when none are set).
func (r Resources) render() map[string]any {
	out := map[string]any{}
	setIf(out, "requests", quantities(r.Requests))
	setIf(out, "limits", quantities(r.Limits))
	return out
}

// setIf sets m[key] = v when v is not empty.
func setIf(m map[string]any, key string, v any) {
	switch x := v.(type) {
	case nil:
		return
	case string:
		if x == "" {
			return
		}
	case map[string]any:
		if len(x) == 0 {
			return
		}
	case []any:
		if len(x) == 0 {
			return
		}
	case map[string]string:
		if len(x) == 0 {
			return
		}
		v = toAnyMap(x)
	}
	m[key] = v
}

func toAnyMap(in map[string]string) map[string]any {
	out := make(map[string]any, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func toAnySlice(in []string) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}
