package reconcile

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
)

// childGVRs maps a child's kind (as render writes it) to its resource.
var childGVRs = map[string]schema.GroupVersionResource{
	"Deployment":   evalsi.Deployments,
	"Service":      evalsi.Services,
	"ScaledObject": evalsi.ScaledObjects,
}
