package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// validations remembers, by object key, the UID and generation whose spec passed its kind's
// Validate: a spec does not change within a generation, so it is checked once, not at every
// reconcile and resync. It only saves work: after a restart every spec is checked again.
type validations struct {
	mu     sync.Mutex
	passed map[string]validated
}

type validated struct {
	uid        types.UID
	generation int64
}

// check runs validate on obj unless its generation passed before.
func (v *validations) check(key string, obj *unstructured.Unstructured, validate func(*unstructured.Unstructured) error) error {
	id := validated{obj.GetUID(), obj.GetGeneration()}
	v.mu.Lock()
	ok := v.passed[key] == id
	v.mu.Unlock()
	if ok {
		return nil
	}
	if err := validate(obj); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.passed == nil {
		v.passed = map[string]validated{}
	}
	v.passed[key] = id
	return nil
}

// forget drops what is remembered of key (a deleted object).
func (v *validations) forget(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.passed, key)
}
