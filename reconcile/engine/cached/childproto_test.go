package cached

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// sameChild compares Children field by field, the interned and unexported ones included.
var sameChild = cmp.Exporter(func(reflect.Type) bool { return true })

// protobufOf encodes obj as the API server does for a protobuf client: the magic, then a
// runtime.Unknown holding its type and message.
func protobufOf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// protobufEvent is one frame of a protobuf watch stream: its length, then a metav1.WatchEvent.
func protobufEvent(t testing.TB, typ watch.EventType, object []byte) []byte {
	t.Helper()
	ev := metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: object}}
	msg, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
}

// deploymentProtobuf is deploymentJSON encoded as protobuf.
func deploymentProtobuf(t testing.TB) []byte {
	t.Helper()
	var d appsv1.Deployment
	if err := json.Unmarshal([]byte(deploymentJSON), &d); err != nil {
		t.Fatal(err)
	}
	return protobufOf(t, &d)
}

// A child read from protobuf is the Child read from its JSON: identity, owner, spec hash, the
// operator's field set, replicas, rollout counts and the refusal of its pods.
func TestProtobufChildIsTheJSONChild(t *testing.T) {
	fromJSON, err := DecodeChild([]byte(deploymentJSON))
	if err != nil {
		t.Fatal(err)
	}
	fromProtobuf, err := DecodeServedChild(deploymentProtobuf(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromJSON, fromProtobuf, sameChild); diff != "" {
		t.Errorf("protobuf against JSON (-json +protobuf):\n%s", diff)
	}
	if fromProtobuf.deployment == nil || fromProtobuf.deployment.status.ReadyReplicas != 2 || fromProtobuf.SpecHash != "h1" ||
		fromProtobuf.deployment.status.PodsRefused != `pods "pool-7c9d" is forbidden: exceeded quota: compute` {
		t.Errorf("the Deployment lost what a Child keeps: %+v", fromProtobuf)
	}
}

// A protobuf watch stream gives the events its JSON stream gives: a child, a bookmark that ends
// the initial events, an expired version's error.
func TestProtobufWatchIsTheJSONWatch(t *testing.T) {
	bookmark := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "8", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	bookmark.APIVersion, bookmark.Kind = "apps/v1", "Deployment"
	expired := &metav1.Status{Status: metav1.StatusFailure, Message: "too old resource version: 1 (8)", Reason: metav1.StatusReasonExpired, Code: 410}
	expired.APIVersion, expired.Kind = "v1", "Status"
	stream := slices.Concat(protobufEvent(t, watch.Added, deploymentProtobuf(t)),
		protobufEvent(t, watch.Bookmark, protobufOf(t, bookmark)),
		protobufEvent(t, watch.Error, protobufOf(t, expired)))
	jsonStream := `{"type":"ADDED","object":` + deploymentJSON + "}\n" +
		`{"type":"BOOKMARK","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n" +
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (8)","reason":"Expired","code":410}}` + "\n"
	w := newChildWatch(io.NopCloser(bytes.NewReader(stream)))
	defer w.Stop()
	fromJSON := newChildWatch(io.NopCloser(bytes.NewReader([]byte(jsonStream))))
	defer fromJSON.Stop()
	if diff := cmp.Diff(drain(t, fromJSON), drain(t, w), sameChild); diff != "" {
		t.Errorf("protobuf events against JSON (-json +protobuf):\n%s", diff)
	}
}

// A protobuf list's items, which carry no type, are children of the list's kind without "List".
func TestProtobufChildList(t *testing.T) {
	var d appsv1.Deployment
	if err := json.Unmarshal([]byte(deploymentJSON), &d); err != nil {
		t.Fatal(err)
	}
	list := &appsv1.DeploymentList{ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "c"}, Items: []appsv1.Deployment{d, d}}
	list.APIVersion, list.Kind = "apps/v1", "DeploymentList"
	l, err := decodeServedChildList(protobufOf(t, list))
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeChild([]byte(deploymentJSON))
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != "9" || l.Continue != "c" || len(l.Items) != 2 {
		t.Fatalf("list: rv %q, continue %q, %d items", l.ResourceVersion, l.Continue, len(l.Items))
	}
	for _, c := range l.Items {
		if diff := cmp.Diff(want, c, sameChild); diff != "" {
			t.Errorf("item (-want +got):\n%s", diff)
		}
	}
	if _, err := decodeServedChildList(append(protobufOf(t, list), 0xff)); err == nil {
		t.Error("a list with a broken tail decoded")
	}
}

// FuzzProtobufChildWatch feeds the child watch decoder arbitrary protobuf streams (the seeds: a
// child, a bookmark, an error, a frame cut short, a frame longer than any object): it never
// panics or hangs, and every event it gives is one a reflector takes.
func FuzzProtobufChildWatch(f *testing.F) {
	child := protobufEvent(f, watch.Added, deploymentProtobuf(f))
	for _, seed := range [][]byte{
		child,
		slices.Concat(child, protobufEvent(f, watch.Deleted, deploymentProtobuf(f))),
		protobufEvent(f, watch.Error, []byte("k8s\x00\x12\x02\x30\x01")),
		child[:len(child)/2],
		{0, 0, 0, 1, 0xff},
		{0x7f, 0xff, 0xff, 0xff},
		{0, 0, 0, 2, 0x0a, 0x00},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		w := newChildWatch(io.NopCloser(bytes.NewReader(stream)))
		defer w.Stop()
		checkEvents[*Child](t, drain(t, w))
	})
}

// FuzzDecodeServedChild feeds the decoder of a served child arbitrary bytes after protobuf's
// magic: it never panics, and what it decodes is a Child.
func FuzzDecodeServedChild(f *testing.F) {
	f.Add(deploymentProtobuf(f)[len(protobufMagic):])
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, err := DecodeServedChild(append(bytes.Clone(protobufMagic), msg...))
		if err == nil && c == nil {
			t.Error("no Child and no error")
		}
	})
}

// BenchmarkDecodeDeployment reads one Deployment as a Child from each media type the API server
// serves it in.
func BenchmarkDecodeDeployment(b *testing.B) {
	for _, c := range []struct {
		name string
		raw  []byte
	}{{"json", []byte(deploymentJSON)}, {"protobuf", deploymentProtobuf(b)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.raw)))
			for b.Loop() {
				if _, err := DecodeServedChild(c.raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
