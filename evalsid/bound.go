package evalsid

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
)

// BoundObjects says whether the objects a service-account token names still exist: a token
// outlives its service account or pod (a projected token lasts up to a day, a requested one a
// year), and the same name made again is another object with another UID.
type BoundObjects interface {
	// Exists reports whether the object of resource ("serviceaccounts" or "pods") called name in
	// namespace exists with uid.
	Exists(ctx context.Context, resource, namespace, name, uid string) (bool, error)
}

// BoundObjectsTTL is how long LiveObjects keeps an answer: a token of a deleted service account
// or pod is refused at most this long after the deletion.
const BoundObjectsTTL = 30 * time.Second

// boundObjectsKept bounds how many answers LiveObjects keeps (a service account and a pod per
// pool replica that calls).
const boundObjectsKept = 50_000

// LiveObjects answers BoundObjects by reading the objects from the API server (get on
// serviceaccounts and pods), keeping each answer for a while so that a pool calling every few
// seconds costs a read per TTL, not per call.
type LiveObjects struct {
	kube    kubernetes.Interface
	ttl     time.Duration
	answers *utilcache.LRUExpireCache
}

// NewLiveObjects returns LiveObjects that read through kube and keep each answer for ttl.
func NewLiveObjects(kube kubernetes.Interface, ttl time.Duration) *LiveObjects {
	return &LiveObjects{kube: kube, ttl: ttl, answers: utilcache.NewLRUExpireCache(boundObjectsKept)}
}

// Exists reads the object, or answers from what it read within the TTL.
func (l *LiveObjects) Exists(ctx context.Context, resource, namespace, name, uid string) (bool, error) {
	key := resource + "/" + namespace + "/" + name + "/" + uid
	if v, ok := l.answers.Get(key); ok {
		return v.(bool), nil
	}
	got, err := l.read(ctx, resource, namespace, name)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading %s %s/%s: %w", resource, namespace, name, err)
	}
	exists := string(got) == uid
	l.answers.Add(key, exists, l.ttl)
	return exists, nil
}

// read returns the UID of the object of resource called name in namespace.
func (l *LiveObjects) read(ctx context.Context, resource, namespace, name string) (types.UID, error) {
	ctx, cancel := context.WithTimeout(ctx, missReadTimeout)
	defer cancel()
	switch resource {
	case "serviceaccounts":
		sa, err := l.kube.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return sa.UID, nil
	case "pods":
		pod, err := l.kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return pod.UID, nil
	}
	return "", fmt.Errorf("tokens bound to %s are not checked", resource)
}
