package engine

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Owners, like children, are listed and watched as JSON decoded straight into what the cache
// keeps (cachedOwnerFromJSON), not through the dynamic client, which decoded every object into
// maps only for the cache to encode it back to JSON.

// ownerListWatch lists and watches the objects of kind k's resource gvr in namespace ("" for
// all) over rc (a REST client of dynamic.ConfigFor's JSON config).
func ownerListWatch(rc rest.Interface, gvr schema.GroupVersionResource, namespace string, k *Kind) *cache.ListWatch {
	request := func(options metav1.ListOptions) *rest.Request {
		return rc.Get().AbsPath(resourcePath(gvr, namespace)).VersionedParams(&options, metav1.ParameterCodec)
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			raw, err := rawResult(request(options).Do(ctx))
			if err != nil {
				return nil, err
			}
			return decodeOwnerList(raw, k)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.Watch = true
			body, err := request(options).Stream(ctx)
			if err != nil {
				return nil, err
			}
			return newStreamWatch(body, func(dec *json.Decoder) (watch.Event, error) { return decodeOwnerEvent(dec, k) }), nil
		},
	}
}

// ownerList is a list of owners: what a list request returns, as the reflector reads it.
type ownerList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []*cachedOwner
}

// DeepCopyObject returns a copy of l.
func (l *ownerList) DeepCopyObject() runtime.Object {
	out := &ownerList{TypeMeta: l.TypeMeta, Items: make([]*cachedOwner, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i, o := range l.Items {
		out.Items[i] = o.DeepCopyObject().(*cachedOwner)
	}
	return out
}

// decodeOwnerList decodes a list response of kind k's objects.
func decodeOwnerList(raw []byte, k *Kind) (*ownerList, error) {
	var j struct {
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("decoding a list of owners: %w", err)
	}
	l := &ownerList{ListMeta: j.Metadata, Items: make([]*cachedOwner, 0, len(j.Items))}
	for _, item := range j.Items {
		o, err := cachedOwnerFromJSON(item, k)
		if err != nil {
			return nil, err
		}
		l.Items = append(l.Items, o)
	}
	return l, nil
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
