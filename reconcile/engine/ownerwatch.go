package engine

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Owners, like children, are listed and watched decoded straight into what the cache keeps
// (cachedOwnerFromJSON; owners are custom resources, which are served as JSON only), not through
// the dynamic client, which decoded every object into maps only for the cache to encode it back
// to JSON.

// ownerListWatch lists and watches the objects of kind k's resource gvr in namespace ("" for
// all) over rc (the engine's REST client), as JSON (custom resources serve nothing else).
func ownerListWatch(rc rest.Interface, gvr schema.GroupVersionResource, namespace string, k *Kind) *cache.ListWatch {
	return streamListWatch(rc, gvr, namespace, "", "", "",
		func(raw []byte) (runtime.Object, error) { return decodeOwnerList(raw, k) },
		jsonEvents(func(dec *json.Decoder) (watch.Event, error) { return decodeOwnerEvent(dec, k) }))
}

// decodeOwnerList decodes a list response of kind k's objects.
func decodeOwnerList(raw []byte, k *Kind) (*cachedList[*cachedOwner], error) {
	return decodeList(raw, func(item *json.RawMessage) (*cachedOwner, error) { return cachedOwnerFromJSON(*item, k) })
}

// decodeOwnerEvent decodes the next event of a stream of kind k's objects.
func decodeOwnerEvent(dec *json.Decoder, k *Kind) (watch.Event, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := dec.Decode(&ev); err != nil {
		return watch.Event{}, err
	}
	switch ev.Type {
	case watch.Error:
		status := &metav1.Status{}
		if err := json.Unmarshal(ev.Object, status); err != nil {
			return undecodable(fmt.Errorf("decoding a watch's error: %w", err)), nil
		}
		status.Status = metav1.StatusFailure
		return watch.Event{Type: watch.Error, Object: status}, nil
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		o, err := cachedOwnerFromJSON(ev.Object, k)
		if err != nil {
			return undecodable(err), nil
		}
		return watch.Event{Type: ev.Type, Object: o}, nil
	}
	return watch.Event{Type: ev.Type}, nil
}
