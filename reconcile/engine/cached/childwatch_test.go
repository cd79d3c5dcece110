package cached

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
	"unique"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// A Deployment as a watch event carries it: the engine keeps its identity, owner, spec hash,
// replicas, rollout counts and the operator's field set, and nothing of other managers.
const deploymentJSON = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"pool","namespace":"ns","uid":"u1",
"resourceVersion":"7","generation":2,"annotations":{"evals.si/spec-hash":"h1","deployment.kubernetes.io/revision":"1"},
"labels":{"app":"x"},"ownerReferences":[{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","name":"pool","uid":"o1","controller":true}],
"managedFields":[{"manager":"evalsi-operator","operation":"Apply","apiVersion":"apps/v1","fieldsV1":{"f:metadata":{"f:ownerReferences":{"k:{\"uid\":\"o1\"}":{}}},"f:spec":{"f:replicas":{}}}},
{"manager":"kube-controller-manager","operation":"Update","subresource":"status","fieldsV1":{"f:status":{"f:replicas":{}}}}]},
"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"c","image":"i"}]}}},
"status":{"observedGeneration":2,"replicas":3,"readyReplicas":2,"updatedReplicas":3,"availableReplicas":2,"conditions":[{"type":"Available","status":"True"},
{"type":"ReplicaFailure","status":"True","reason":"FailedCreate","message":"pods \"pool-7c9d\" is forbidden: exceeded quota: compute"}]}}`

func TestChildWatchDecodesEachEvent(t *testing.T) {
	stream := `{"type":"ADDED","object":` + deploymentJSON + "}\n" +
		`{"type":"BOOKMARK","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n" +
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (8)","reason":"Expired","code":410}}` + "\n"
	w := newChildWatch(io.NopCloser(strings.NewReader(stream)))
	defer w.Stop()
	var got []watch.Event
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				done = true
				break
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatal("the watch did not end with its stream")
		}
	}
	if len(got) != 3 {
		t.Fatalf("got %d events, want 3: %v", len(got), got)
	}
	added, ok := got[0].Object.(*Child)
	if got[0].Type != watch.Added || !ok {
		t.Fatalf("first event: %s %T", got[0].Type, got[0].Object)
	}
	replicas := int64(3)
	wantMeta := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", UID: "u1", ResourceVersion: "7", Generation: 2,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "evals.si/v1alpha1", Kind: "Evaluator", Name: "pool", UID: "o1", Controller: new(true)}},
		},
	}
	if diff := cmp.Diff(wantMeta, metadataOf(t, added)); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	want := &deployment{replicas: &replicas, status: rolloutCounts{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3, AvailableReplicas: 2,
		PodsRefused: `pods "pool-7c9d" is forbidden: exceeded quota: compute`}}
	if diff := cmp.Diff(want, added.deployment, cmp.AllowUnexported(deployment{})); diff != "" || added.SpecHash != "h1" {
		t.Errorf("Deployment (-want +got):\n%s, spec hash %q", diff, added.SpecHash)
	}
	if owned := added.owned.Value(); added.owned == (unique.Handle[string]{}) || !strings.Contains(owned, ownerPlaceholder) || strings.Contains(owned, "f:status") {
		t.Errorf("the operator's field set is %q, want its apply's with the owner's UID factored out", owned)
	}
	bookmark, _ := meta.Accessor(got[1].Object)
	if got[1].Type != watch.Bookmark || bookmark.GetResourceVersion() != "8" || bookmark.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark: %s %+v", got[1].Type, got[1].Object)
	}
	if err := apierrors.FromObject(got[2].Object); got[2].Type != watch.Error || !apierrors.IsResourceExpired(err) {
		t.Errorf("error event: %s %v, want an expired resource version", got[2].Type, err)
	}
}

// drain returns the events of w until its stream ends, failing after a bound.
func drain(t testing.TB, w *streamWatch) []watch.Event {
	t.Helper()
	var got []watch.Event
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatal("the watch did not end with its stream within 10s")
			return got
		}
	}
}

// A stream that breaks mid-event ends the watch; an event that does not decode is an error
// event; the reflector watches again.
func TestChildWatchEndsOnABrokenStream(t *testing.T) {
	w := newChildWatch(io.NopCloser(strings.NewReader(`{"type":"ADDED","object":{"kind":`)))
	defer w.Stop()
	for _, ev := range drain(t, w) {
		t.Errorf("unexpected event %s %v", ev.Type, ev.Object)
	}
	w = newChildWatch(io.NopCloser(strings.NewReader(`{"type":"ADDED","object":{"kind":"Deployment","status":"x"}}`)))
	defer w.Stop()
	got := drain(t, w)
	if len(got) == 0 || got[0].Type != watch.Error {
		t.Errorf("an undecodable Deployment status gave %v, want an error event", got)
	}
}

// FuzzChildWatch feeds the child watch decoder arbitrary streams (the seeds: events of each type,
// bookmarks, ERROR events, broken and concatenated streams): it never panics or hangs, ends when
// the stream ends, and every event it gives is one a reflector takes (a Child for ADDED, MODIFIED
// and DELETED, a Child for BOOKMARK, a Status for ERROR).
func FuzzChildWatch(f *testing.F) {
	for _, seed := range []string{
		`{"type":"ADDED","object":` + deploymentJSON + "}\n",
		`{"type":"MODIFIED","object":` + deploymentJSON + `}{"type":"DELETED","object":` + deploymentJSON + "}",
		`{"type":"BOOKMARK","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}}`,
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}}`,
		`{"type":"ADDED","object":{"kind":`,
		`{"type":"ADDED","object":{"kind":"Deployment","status":"x"}}`,
		`{"type":"SURPRISE","object":{}}`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		w := newChildWatch(io.NopCloser(bytes.NewReader(stream)))
		defer w.Stop()
		checkEvents[*Child](t, drain(t, w))
	})
}

// checkEvents fails t for each event a reflector would not take: a T for ADDED, MODIFIED, DELETED
// and BOOKMARK, a Status for ERROR, no other type.
func checkEvents[T any](t *testing.T, evs []watch.Event) {
	t.Helper()
	for _, ev := range evs {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
			if _, ok := ev.Object.(T); !ok {
				t.Errorf("%s event of a %T, want a %T", ev.Type, ev.Object, *new(T))
			}
		case watch.Error:
			if _, ok := ev.Object.(*metav1.Status); !ok {
				t.Errorf("ERROR event of a %T, want a *metav1.Status", ev.Object)
			}
		default:
			t.Errorf("event of type %q", ev.Type)
		}
	}
}

// FuzzDecodeChildList feeds the list decoder arbitrary JSON: it never panics, and a list it
// decodes holds only Children.
func FuzzDecodeChildList(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{"resourceVersion":"9"},"items":[` + deploymentJSON + `]}`))
	f.Add([]byte(`{"items":[{"kind":"Deployment","status":[]}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := decodeChildList(raw)
		if err != nil {
			return
		}
		for _, c := range l.Items {
			if c == nil {
				t.Error("a nil item")
			}
		}
	})
}

func TestDecodeChildList(t *testing.T) {
	l, err := decodeChildList([]byte(`{"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{"resourceVersion":"9","continue":"c"},"items":[` + deploymentJSON + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(l)
	if err != nil || len(items) != 1 || l.GetResourceVersion() != "9" || l.GetContinue() != "c" {
		t.Fatalf("list: %v items, rv %q, continue %q, %v", len(items), l.GetResourceVersion(), l.GetContinue(), err)
	}
	if c := items[0].(*Child); c.Name != "pool" || c.deployment.status.ReadyReplicas != 2 {
		t.Errorf("item: %+v", c)
	}
	if _, err := decodeChildList([]byte(`{"items":[{"kind":"Deployment","status":[]}]}`)); err == nil {
		t.Error("a list with an undecodable item decoded")
	}
}
