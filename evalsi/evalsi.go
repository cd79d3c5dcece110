// Package evalsi is the vocabulary of the evals.si API as the operator speaks it: the group and
// version, the resources, the labels and annotations on objects and their children, the
// finalizers, and the condition types, reasons and phases of statuses. Every other package names
// these through it (TestVocabularyHasOneHome keeps string literals of them out of the others), so
// a reason is spelled once and a reader finds every value a condition can take in one place.
package evalsi

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// The API group and its one served version.
const (
	Group   = "evals.si"
	Version = "v1alpha1"
)

// resource returns the GVR of an evals.si resource.
func resource(name string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: Version, Resource: name}
}

// Resources of the evals.si kinds.
var (
	EvalRuns           = resource("evalruns")
	OnlineEvalPolicies = resource("onlineevalpolicies")
	TraceSources       = resource("tracesources")
	Evaluators         = resource("evaluators")
	SandboxClasses     = resource("sandboxclasses")
	CheckpointServers  = resource("checkpointservers")
)

// Resources of the children the operator renders.
var (
	Deployments            = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	Services               = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	ServiceAccounts        = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	ScaledObjects          = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}
	TriggerAuthentications = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "triggerauthentications"}
	NetworkPolicies        = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	Roles                  = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	RoleBindings           = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	PodTemplates           = schema.GroupVersionResource{Version: "v1", Resource: "podtemplates"}
)

// ChildResources maps the kind of a child the operator renders to its resource.
var ChildResources = map[string]schema.GroupVersionResource{
	"Deployment":            Deployments,
	"Service":               Services,
	"ServiceAccount":        ServiceAccounts,
	"ScaledObject":          ScaledObjects,
	"TriggerAuthentication": TriggerAuthentications,
	"NetworkPolicy":         NetworkPolicies,
	"Role":                  Roles,
	"RoleBinding":           RoleBindings,
	"PodTemplate":           PodTemplates,
}

// Labels.
const (
	// LabelProject names a project: on a Namespace (set by a cluster administrator, since
	// namespace editors cannot write Namespaces) it binds the namespace to that project; on an
	// evals.si object it may repeat the project its namespace is bound to, and name no other.
	LabelProject = Group + "/project"
	// Labels every child carries.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	// ManagedBy is the value of LabelManagedBy on children; the operator watches children by it.
	ManagedBy = "evalsi"
)

// QueueReaderServiceAccount is the service account, one per namespace with autoscaled pools, that
// KEDA reads pools' queues in evalsid as; evalsid lets it do nothing else.
const QueueReaderServiceAccount = "evalsi-queue-reader"

// OperatorServiceAccount is the service account a namespace's operator runs as (chart evalsi):
// evalsid lets it write runs, policies and trace sources of its namespace's project, and forward
// their creator.
const OperatorServiceAccount = "evalsi-operator"

// OperatorBinary is this repository's binary, on PATH in the operator image and every image
// built FROM it (the platform and plugin images).
const OperatorBinary = "evalsi-operator"

// FieldManager is the one field manager of every write the operator makes (and of the webhook's
// dry runs of what it would apply), so that server-side apply knows the fields as the operator's.
const FieldManager = "evalsi-operator"

// ChildFieldValidation is the fieldValidation of every apply of a child (and of the webhook's
// dry runs of them). With the default (Warn) the API server parses an apply body twice: once to
// apply it, and again, strictly, into a map, which can only find a key written twice and warn of
// it; the operator's encoder writes maps, which have no key twice. That second parse was 4.8% of
// the API server's CPU while the operator converged 10,000 Evaluators (a profile of the API
// server). The webhook's TestChildrenPassServerDryRun still applies every valid case, example and
// generated spec's children with fieldValidation=Strict.
const ChildFieldValidation = "Ignore"

// LeaderElectionID is the default name of the operator's leader Lease, which the uninstall hook
// waits on too.
const LeaderElectionID = "evalsi-operator"

// PlatformServiceAccounts are the service accounts the charts make for the platform's own
// programs. No pool may run as one (an Evaluator naming one is refused), since their tokens carry
// the platform's rights: the operator's at evalsid, the webhook's and sandboxd's at the API server.
var PlatformServiceAccounts = []string{
	OperatorServiceAccount,
	QueueReaderServiceAccount,
	"evalsi-webhook",
	"evalsi-sandboxd",
	"evalsi-release-finalizers",
	"evalsid",
	"evalsi-sandbox",
}

// LabelPoolServiceAccount on a ServiceAccount, with the value "true", is a namespace
// administrator's consent that Evaluator pools run as it (spec.serviceAccountName). Without it an
// Evaluator that names the account is refused: the account may hold rights (cloud IAM bindings,
// RBAC) that whoever writes Evaluators should not get by naming it.
const LabelPoolServiceAccount = Group + "/pool-service-account"

// ProjectOf returns the project a namespace acts in, given its labels and whether another
// Namespace is bound by label to the project named like it (claimed): the project a cluster
// administrator bound it to with LabelProject; else the project named like the namespace while
// that project is not claimed; else none (false). Anyone who may create namespaces may make one
// named like a project: once a project's namespaces are bound by label, a namespace acts in it
// only by the label too. The operator, the webhook and evalsid all apply this one rule.
func ProjectOf(namespace string, labels map[string]string, claimed bool) (string, bool) {
	if p := labels[LabelProject]; p != "" {
		return p, true
	}
	if claimed {
		return "", false
	}
	return namespace, true
}

// ServiceAccountIdentity is the Kubernetes user name of a service account, as tokens name it.
func ServiceAccountIdentity(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// ParseServiceAccountIdentity returns the namespace and name of a service account's user name,
// and false for any other user.
func ParseServiceAccountIdentity(identity string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(identity, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// KubernetesMinor is the one Kubernetes minor the operator supports: the one its tests run on
// (the control plane of package cluster; a test holds them together).
const KubernetesMinor = "1.37"

// MinorOf returns "major.minor" of a server version, tolerating the "+" that some providers
// append to the minor ("37+"): what is compared with KubernetesMinor.
func MinorOf(v *version.Info) string {
	return v.Major + "." + strings.TrimSuffix(v.Minor, "+")
}

// DefaultTokenAudience is the audience of the service-account tokens evalsid accepts, unless it
// is configured with another.
const DefaultTokenAudience = "evalsi"

// Annotations.
const (
	// AnnotationSpecHash holds a hash of the applied child so that a change of the desired object
	// (including a removed field) is seen without comparing whole objects.
	AnnotationSpecHash = Group + "/spec-hash"
	// AnnotationOutlives on a child names a sibling, KIND/NAME in the child's namespace, that
	// must go before it: the engine makes the child a dependent of that sibling too, so that the
	// garbage collector, which deletes an owner's children in no set order, deletes it only once
	// the sibling is gone when the owner is deleted in the background, as kubectl and helm do (a
	// pod rung class's trial shape outlives its launcher's RoleBinding). A foreground deletion
	// deletes dependents first, down the chain, and so the child before the sibling.
	AnnotationOutlives = Group + "/outlives"
	// AnnotationCreatedBy holds the authenticated user who created an evals.si object, written by
	// admission; the operator forwards it to evalsid as the creator.
	AnnotationCreatedBy = Group + "/created-by"
	// AnnotationTTLAfterFinished is how long an EvalRun stays after its run ended (a Go duration
	// such as 168h, or "never"), overriding the operator's --evalrun-ttl. The run and its
	// results stay on evalsid. An annotation, not a spec field: the spec is the API message.
	AnnotationTTLAfterFinished = Group + "/ttl-after-finished"
)

// TTLNever is the AnnotationTTLAfterFinished value that keeps a finished EvalRun.
const TTLNever = "never"

// ParseTTL reads an AnnotationTTLAfterFinished value: the duration, or keep (never).
func ParseTTL(v string) (ttl time.Duration, keep bool, err error) {
	if v == TTLNever {
		return 0, true, nil
	}
	ttl, err = time.ParseDuration(v)
	if err != nil || ttl < 0 {
		return 0, false, fmt.Errorf("%q is neither a duration of at least 0 (such as 168h) nor %q", v, TTLNever)
	}
	return ttl, false, nil
}

// Finalizers: each holds an object until the server has let go of what the operator made for it.
const (
	FinalizerCancelRun         = Group + "/cancel-run"
	FinalizerDeletePolicy      = Group + "/delete-policy"
	FinalizerDeleteTraceSource = Group + "/delete-trace-source"
)

// Condition types.
const (
	// ConditionReady is on every kind.
	ConditionReady = "Ready"
	// ConditionStalled says that nothing changes until the spec does (the kstatus convention).
	ConditionStalled = "Stalled"
	// ConditionComplete and ConditionFailed say how an EvalRun's run ended, as a Job's do.
	ConditionComplete = "Complete"
	ConditionFailed   = "Failed"
	// ConditionIsolated says, on a SandboxClass, whether its pool's pods meet the rung's
	// isolation floor, by what their probe found.
	ConditionIsolated = "Isolated"
)

// Reasons of conditions.
const (
	ReasonInvalidSpec              = "InvalidSpec"
	ReasonProjectNotAllowed        = "ProjectNotAllowed"
	ReasonClassNotAllowed          = "ClassNotAllowed"
	ReasonClassNotFound            = "ClassNotFound"
	ReasonServiceAccountNotAllowed = "ServiceAccountNotAllowed"
	ReasonRollingOut               = "RollingOut"
	ReasonAvailable                = "Available"
	ReasonAutoscalingUnavailable   = "AutoscalingUnavailable"
	ReasonNoReplicas               = "NoReplicas"
	ReasonServing                  = "Serving"
	ReasonWaitingForTarget         = "WaitingForTarget"
	ReasonRunNotFound              = "RunNotFound"
	ReasonExpired                  = "Expired"
	ReasonApplied                  = "Applied"
	ReasonConflict                 = "Conflict"
	ReasonAPIUnavailable           = "APIUnavailable"
	ReasonRejected                 = "Rejected"
	ReasonUnauthenticated          = "Unauthenticated"
	ReasonPermissionDenied         = "PermissionDenied"
	ReasonAPIError                 = "APIError"
	ReasonFloorMet                 = "FloorMet"
	ReasonFloorNotMet              = "FloorNotMet"
	ReasonProbing                  = "Probing"
)

// Phases of an EvalRun's run; a terminal phase is also the reason of its conditions.
const (
	PhasePending   = "Pending"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
	PhaseCancelled = "Cancelled"
)

// TerminalPhase reports whether a run in phase has ended.
func TerminalPhase(phase string) bool {
	return phase == PhaseSucceeded || phase == PhaseFailed || phase == PhaseCancelled
}

// LabelShardBucket on a child is its owner's bucket (shard.Bucket of the owner's UID), by which a
// replica that reconciles a shard of the owners watches only that shard's children.
const LabelShardBucket = Group + "/shard-bucket"

// WorkloadSigner is the signer name of the platform's workload certificates (package podcert):
// pools mount a podCertificate projected volume of it, and evalsid holds each certificate's
// common name to the token presented beside it.
const WorkloadSigner = "evals.si/workload"
