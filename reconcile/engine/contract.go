package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
	"evals.si/operator/unstructuredjson"
)

// StampChild puts on child what the engine finds, selects and compares children by, whatever
// kind renders them:
//   - the label evalsi.LabelManagedBy=evalsi.ManagedBy: the child informers watch only these;
//   - the label evalsi.LabelShardBucket, owner's bucket (shard.Bucket of its UID): a replica
//     holding some shards watches only their buckets' children;
//   - owner as the child's controller (an ownerReference with blockOwnerDeletion): the children
//     of an owner are found by it, and the garbage collector deletes them with it;
//   - evalsi.AnnotationSpecHash, a hash of all the above and the rest of the child: a child is
//     applied again when its rendering's hash differs from the live one's.
//
// SyncChildren stamps every child it is given, and the `render` command and the webhook's dry
// run stamp what they show and try, so a reconciler only renders bare objects. StampChild
// changes child in place; the other labels, annotations and owner references it had stay.
func StampChild(owner, child *unstructured.Unstructured) error {
	labels := child.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[evalsi.LabelManagedBy] = evalsi.ManagedBy
	labels[evalsi.LabelShardBucket] = strconv.Itoa(shard.Bucket(string(owner.GetUID())))
	child.SetLabels(labels)

	controller := true
	refs := []metav1.OwnerReference{{
		APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID(),
		Controller: &controller, BlockOwnerDeletion: &controller,
	}}
	for _, r := range child.GetOwnerReferences() {
		if r.Controller == nil || !*r.Controller {
			refs = append(refs, r)
		}
	}
	child.SetOwnerReferences(refs)

	ann := child.GetAnnotations()
	delete(ann, evalsi.AnnotationSpecHash)
	if len(ann) == 0 {
		ann = nil // no annotations at all, not an empty map: the same hash however often stamped
	}
	child.SetAnnotations(ann)
	data, err := unstructuredjson.Marshal(child.Object)
	if err != nil {
		return fmt.Errorf("hashing %s %s: %w", child.GetKind(), child.GetName(), err)
	}
	sum := sha256.Sum256(data)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[evalsi.AnnotationSpecHash] = hex.EncodeToString(sum[:8])
	child.SetAnnotations(ann)
	return nil
}
