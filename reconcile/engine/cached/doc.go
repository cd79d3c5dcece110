// Package cached is what the engine's informers keep of the objects they watch, and the codecs
// that read those objects off the wire straight into it: a child (Child) as protobuf or JSON, an
// owner (Owner) as JSON pruned of what no reconcile reads, each in a few hundred bytes where the
// object decoded into maps takes tens of kilobytes. Beside them: the list and watch functions
// that stream into these forms (ChildListWatch, OwnerListWatch, ShardListWatch), the field sets
// the drift check reads (Child.Unowned), the index of children by owner (ChildrenByOwner), the
// writes the engine made but its informers have not shown yet (RecentWrites), how far a
// Deployment has rolled out (RolloutOf), the gate that holds the lists and watches while the
// API server cannot be reached (APIGate), and the API server's discovery answers that the engines
// of one process share (Discovery). It names no engine, controller or kind.
package cached

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Asks is what a kind asks of each version of its objects as it enters the cache, answered once
// and kept beside it, so that nothing reads every object each time it wants to know.
type Asks struct {
	// Followed says whether something follows the object in an external API.
	Followed func(*unstructured.Unstructured) bool
	// Refers returns the objects the object waits on by name, as the referrers index keys them.
	Refers func(*unstructured.Unstructured) []string
}
