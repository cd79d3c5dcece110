package cached

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
)

// Children are listed and watched decoded straight into Child (childJSON, childproto.go), not
// through the dynamic client: a child's watch events are most of what the operator reads (a
// Deployment's status changes with each pod), and decoding each whole object into maps, only for
// the cache's transform to drop all but a few fields, was the largest cost of converging.

// ChildListWatch lists and watches the children of resource gvr in namespace ("" for all) that
// match selector, over rc (the engine's REST client), as protobuf where gvr serves it.
func ChildListWatch(rc rest.Interface, gvr schema.GroupVersionResource, namespace, selector string) *cache.ListWatch {
	return streamListWatch(rc, gvr, namespace, selector, AcceptChild, AcceptChild,
		func(raw []byte) (runtime.Object, error) { return decodeServedChildList(raw) }, childEventReader)
}

// strangerSelector selects the objects the operator did not label as its own.
const strangerSelector = evalsi.LabelManagedBy + "!=" + evalsi.ManagedBy

// The media types of objects' metadata alone (PartialObjectMetadata), as protobuf or JSON.
const (
	acceptMetadataList = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	acceptMetadata     = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
)

// StrangerListWatch lists and watches the metadata of the objects of resource gvr in namespace
// that the operator did not make (strangerSelector), decoded into Child: the names a new child
// must not take (claimName).
func StrangerListWatch(rc rest.Interface, gvr schema.GroupVersionResource, namespace string) *cache.ListWatch {
	return streamListWatch(rc, gvr, namespace, strangerSelector, acceptMetadataList, acceptMetadata,
		func(raw []byte) (runtime.Object, error) { return decodeServedChildList(raw) }, childEventReader)
}

// eventReader reads a watch stream's next event.
type eventReader func() (watch.Event, error)

// jsonEvents returns the reader of JSON watch streams whose events decode decodes.
func jsonEvents(decode func(*json.Decoder) (watch.Event, error)) func(io.Reader) eventReader {
	return func(body io.Reader) eventReader {
		dec := json.NewDecoder(body)
		return func() (watch.Event, error) { return decode(dec) }
	}
}

// streamListWatch lists and watches the objects of resource gvr in namespace ("" for all) that
// match selector ("" for all) over rc, asking for the media types listAccept and watchAccept
// ("" for rc's own), each list decoded by decodeList and each watch stream read by events,
// straight from what the API server sent.
func streamListWatch(rc rest.Interface, gvr schema.GroupVersionResource, namespace, selector, listAccept, watchAccept string,
	decodeList func([]byte) (runtime.Object, error), events func(io.Reader) eventReader) *cache.ListWatch {
	request := func(options metav1.ListOptions, accept string) *rest.Request {
		if selector != "" {
			options.LabelSelector = selector
		}
		r := rc.Get().AbsPath(ResourcePath(gvr, namespace)).VersionedParams(&options, metav1.ParameterCodec)
		if accept != "" {
			r.SetHeader("Accept", accept)
		}
		return r
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			raw, err := RawResult(request(options, listAccept).Do(ctx))
			if err != nil {
				return nil, err
			}
			return decodeList(raw)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.Watch = true
			body, err := request(options, watchAccept).Stream(ctx)
			if err != nil {
				return nil, err
			}
			return newStreamWatch(body, events), nil
		},
	}
}

// ResourcePath is the API path of gvr's objects in namespace ("" for all namespaces).
func ResourcePath(gvr schema.GroupVersionResource, namespace string) string {
	path := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		path = "/api/" + gvr.Version
	}
	if namespace != "" {
		path += "/namespaces/" + namespace
	}
	return path + "/" + gvr.Resource
}

// RawResult returns the body of a request's result, or its error as the API server's Status
// says it (Result.Raw alone gives only the HTTP code's generic message).
func RawResult(res rest.Result) ([]byte, error) {
	if err := res.Error(); err != nil {
		return nil, err
	}
	return res.Raw()
}

// cachedList is a list of what a cache keeps of objects (a Child, a Owner): what a list
// request returns, as the reflector reads it.
type cachedList[T runtime.Object] struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []T
}

// DeepCopyObject returns a copy of l.
func (l *cachedList[T]) DeepCopyObject() runtime.Object {
	out := &cachedList[T]{TypeMeta: l.TypeMeta, Items: make([]T, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i, o := range l.Items {
		out.Items[i] = o.DeepCopyObject().(T)
	}
	return out
}

// decodeList decodes a list response whose items decode as J, each kept as keep says.
func decodeList[J any, T runtime.Object](raw []byte, keep func(*J) (T, error)) (*cachedList[T], error) {
	var j struct {
		Metadata metav1.ListMeta `json:"metadata"`
		Items    []J             `json:"items"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("decoding a list: %w", err)
	}
	l := &cachedList[T]{ListMeta: j.Metadata, Items: make([]T, 0, len(j.Items))}
	for i := range j.Items {
		o, err := keep(&j.Items[i])
		if err != nil {
			return nil, err
		}
		l.Items = append(l.Items, o)
	}
	return l, nil
}

// decodeChildList decodes a list response of children.
func decodeChildList(raw []byte) (*cachedList[*Child], error) {
	return decodeList(raw, (*childJSON).cached)
}

// streamWatch is a watch whose events are decoded from the API server's stream by the reader
// events gives, each in one pass: children (childEventReader) and owners (ownerwatch.go).
type streamWatch struct {
	body   io.ReadCloser
	read   func(io.Reader) eventReader
	events chan watch.Event
	done   chan struct{}
	stop   sync.Once
}

func newStreamWatch(body io.ReadCloser, events func(io.Reader) eventReader) *streamWatch {
	w := &streamWatch{body: body, read: events, events: make(chan watch.Event), done: make(chan struct{})}
	go w.receive()
	return w
}

// newChildWatch is a watch of children over body.
func newChildWatch(body io.ReadCloser) *streamWatch { return newStreamWatch(body, childEventReader) }

// Stop ends the watch and closes its stream.
func (w *streamWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.body.Close()
	})
}

// ResultChan returns the events; it is closed when the stream ends or the watch is stopped.
func (w *streamWatch) ResultChan() <-chan watch.Event { return w.events }

// receive decodes the stream's events until it ends. A stream that ends or breaks closes the
// channel: the reflector watches again from the last version it saw, so nothing is lost. An
// ERROR event carries a Status (an expired version, say), which the reflector acts on.
func (w *streamWatch) receive() {
	defer close(w.events)
	defer w.Stop()
	next := w.read(w.body)
	for {
		ev, err := next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				select {
				case <-w.done: // the stream was closed by Stop
				case w.events <- watch.Event{Type: watch.Error, Object: &metav1.Status{
					Status: metav1.StatusFailure, Message: "reading the watch stream: " + err.Error(),
				}}:
				}
			}
			return
		}
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error:
		default:
			// As client-go's own decoder: an event of no known type ends the watch with an error.
			select {
			case <-w.done:
			case w.events <- watch.Event{Type: watch.Error, Object: &metav1.Status{
				Status: metav1.StatusFailure, Message: fmt.Sprintf("a watch event of type %q", ev.Type),
			}}:
			}
			return
		}
		select {
		case w.events <- ev:
		case <-w.done:
			return
		}
	}
}

// decodeChildEvent decodes the next event of a stream of children.
func decodeChildEvent(dec *json.Decoder) (watch.Event, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object childJSON       `json:"object"`
	}
	if err := dec.Decode(&ev); err != nil {
		return watch.Event{}, err
	}
	switch ev.Type {
	case watch.Error:
		return watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: ev.Object.Code, Reason: ev.Object.Reason, Message: ev.Object.Message}}, nil
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		c, err := ev.Object.cached()
		if err != nil {
			return undecodable(err), nil
		}
		return watch.Event{Type: ev.Type, Object: c}, nil
	}
	return watch.Event{Type: ev.Type}, nil
}

// undecodable is the ERROR event of an object that could not be decoded.
func undecodable(err error) watch.Event {
	return watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}
}
