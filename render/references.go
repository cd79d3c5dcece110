package render

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Reference is an object of the namespace that a workload kind's pods would use with the pool's
// rights, not with those of whoever wrote the spec: the operator (which has them) is then a
// confused deputy unless admission checks that the writer may use the object themselves.
type Reference struct {
	// Pointer is the spec field that names the object.
	Pointer string
	// Resource is the object's resource ("secrets", "configmaps", "persistentvolumeclaims",
	// "serviceaccounts") and Name its name, in the spec's namespace.
	Resource, Name string
}

// References returns the objects a workload kind's spec makes its pods use: the service account
// an Evaluator's pods run as (when it names one), the Secrets and ConfigMaps its variables read,
// and a CheckpointServer's API key Secret and checkpoint claim. Other kinds reference nothing. A
// spec that does not decode references nothing; validation says why.
func References(obj *unstructured.Unstructured) []Reference {
	var refs []Reference
	var env []EnvVar
	switch obj.GetKind() {
	case "Evaluator":
		var spec EvaluatorSpec
		if decodeSpec(obj, &spec) != nil {
			return nil
		}
		if spec.ServiceAccountName != "" {
			refs = append(refs, Reference{Pointer: string(specPointer.at("serviceAccountName")), Resource: "serviceaccounts", Name: spec.ServiceAccountName})
		}
		env = spec.Env
	case "CheckpointServer":
		var spec CheckpointServerSpec
		if decodeSpec(obj, &spec) != nil {
			return nil
		}
		if spec.APIKeySecret != nil {
			refs = append(refs, Reference{Pointer: string(specPointer.at("apiKeySecret").at("name")), Resource: "secrets", Name: spec.APIKeySecret.Name})
		}
		if spec.CheckpointClaim != "" {
			refs = append(refs, Reference{Pointer: string(specPointer.at("checkpointClaim")), Resource: "persistentvolumeclaims", Name: spec.CheckpointClaim})
		}
		env = spec.Env
	default:
		return nil
	}
	for i, e := range env {
		for key, resource := range map[string]string{"secretKeyRef": "secrets", "configMapKeyRef": "configmaps"} {
			ref, _ := e.ValueFrom[key].(map[string]any)
			if name, _ := ref["name"].(string); name != "" {
				refs = append(refs, Reference{Pointer: string(specPointer.at("env").index(i).at("valueFrom").at(key).at("name")), Resource: resource, Name: name})
			}
		}
	}
	return refs
}
