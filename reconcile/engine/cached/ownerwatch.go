package cached

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
// (ownerFromJSON; owners are custom resources, which are served as JSON only), not through
// the dynamic client, which decoded every object into maps only for the cache to encode it back
// to JSON.

// OwnerListWatch lists and watches the owners of resource gvr in namespace ("" for
// all) over rc (the engine's REST client), as JSON (custom resources serve nothing else).
func OwnerListWatch(rc rest.Interface, gvr schema.GroupVersionResource, namespace string, a *Asks) *cache.ListWatch {
	return streamListWatch(rc, gvr, namespace, "", "", "",
		func(raw []byte) (runtime.Object, error) { return decodeOwnerList(raw, a) },
		jsonEvents(func(dec *json.Decoder) (watch.Event, error) { return decodeOwnerEvent(dec, a) }))
}

// decodeOwnerList decodes a list response of owners, answering a of each.
func decodeOwnerList(raw []byte, a *Asks) (*cachedList[*Owner], error) {
	return decodeList(raw, func(item *json.RawMessage) (*Owner, error) { return ownerFromJSON(*item, a) })
}

// decodeOwnerEvent decodes the next event of a stream of owners, answering a of each.
func decodeOwnerEvent(dec *json.Decoder, a *Asks) (watch.Event, error) {
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
		o, err := ownerFromJSON(ev.Object, a)
		if err != nil {
			return undecodable(err), nil
		}
		return watch.Event{Type: ev.Type, Object: o}, nil
	}
	return watch.Event{Type: ev.Type}, nil
}
