package cached

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// evaluatorJSON is an owner as the API server serves it, with what the cache drops (managedFields,
// kubectl's last-applied copy) and what it keeps (another annotation, spec, status).
const evaluatorJSON = `{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","metadata":{"name":"judge","namespace":"team-a",
"uid":"u1","resourceVersion":"9","generation":3,"labels":{"app":"x"},
"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{}}","evals.si/creator":"alice"},
"managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"evals.si/v1alpha1","fieldsV1":{"f:spec":{}}}]},
"spec":{"image":"judge:1","replicas":2,"weights":[0.5,1e3]},"status":{"observedGeneration":3}}`

// TestOwnersFromJSON checks that an owner decoded from its JSON (ownerFromJSON, which cuts
// managedFields and kubectl's copy out of the JSON without decoding the rest) is the owner the
// cache kept when it decoded the whole object (NewOwner), case by case.
func TestOwnersFromJSON(t *testing.T) {
	for name, raw := range map[string]string{
		"everything":           evaluatorJSON,
		"only kubectl's copy":  `{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","metadata":{"name":"a","uid":"u","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}},"spec":{}}`,
		"no annotations":       `{"apiVersion":"evals.si/v1alpha1","kind":"SandboxClass","metadata":{"name":"pod","uid":"u","resourceVersion":"1"}}`,
		"no metadata":          `{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator"}`,
		"bookmark":             `{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}`,
		"deleting, finalizers": `{"apiVersion":"evals.si/v1alpha1","kind":"EvalRun","metadata":{"name":"r","namespace":"n","uid":"u","deletionTimestamp":"2026-12-01T00:00:00Z","finalizers":["evals.si/run"]},"status":{"runId":"x"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ownerFromJSON([]byte(raw), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := wholeCachedOwner(t, []byte(raw))
			if diff := cmp.Diff(metadataOf(t, want), metadataOf(t, got)); diff != "" {
				t.Errorf("type and identity (-whole +from JSON):\n%s", diff)
			}
			compareObjects(t, want, got)
		})
	}
}

// wholeCachedOwner is raw decoded whole, as the cache kept owners before; a bookmark keeps its
// annotation, as the reflector read it from the dynamic client's object.
func wholeCachedOwner(t testing.TB, raw []byte) *Owner {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	end, bookmark := u.GetAnnotations()[metav1.InitialEventsAnnotationKey]
	co, err := NewOwner(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bookmark {
		co.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: end}
	}
	return co
}

// compareObjects fails t when the two cached owners decode to different objects.
func compareObjects(t testing.TB, want, got *Owner) {
	t.Helper()
	w, err := want.Object()
	if err != nil {
		t.Fatal(err)
	}
	g, err := got.Object()
	if err != nil {
		t.Fatalf("decoding %s: %v", got.raw, err)
	}
	// A number as the API server would never send it (1e3) comes back from the whole decoding
	// as 1000, an integer, and from the JSON as it was, a float: compare them as an API server
	// would serve them.
	if diff := cmp.Diff(normalized(t, w), normalized(t, g)); diff != "" {
		t.Errorf("object (-whole +from JSON):\n%s", diff)
	}
}

// normalized is u encoded and decoded again, its numbers as JSON writes them.
func normalized(t testing.TB, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	raw, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return out.Object
}

// FuzzOwnerFromJSON feeds ownerFromJSON arbitrary JSON: it never panics, and whatever the
// whole decoding accepts, it keeps as the same object and identity.
func FuzzOwnerFromJSON(f *testing.F) {
	f.Add([]byte(evaluatorJSON))
	f.Add([]byte(`{"apiVersion":"v","kind":"K","metadata":{"name":"a","annotations":{"kubectl.kubernetes.io/last-applied-configuration":""}}}`))
	f.Add([]byte(`{"apiVersion":"v","kind":"K","metadata":{"generation":1.5}}`))
	f.Add([]byte(`{"apiVersion":"v","kind":"K","metadata":null,"spec":{"a":{"b":[1,2,{"c":null}]}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := ownerFromJSON(raw, nil)
		u := &unstructured.Unstructured{}
		if u.UnmarshalJSON(raw) != nil || err != nil {
			return
		}
		want := wholeCachedOwner(t, raw)
		if diff := cmp.Diff(metadataOf(t, want), metadataOf(t, got)); diff != "" {
			t.Errorf("type and identity (-whole +from JSON):\n%s", diff)
		}
		compareObjects(t, want, got)
	})
}

// FuzzOwnerWatch feeds the owner watch decoder arbitrary streams: it never panics or hangs, ends
// when the stream ends, and every event it gives is one a reflector takes.
func FuzzOwnerWatch(f *testing.F) {
	for _, seed := range []string{
		`{"type":"ADDED","object":` + evaluatorJSON + "}\n",
		`{"type":"MODIFIED","object":` + evaluatorJSON + `}{"type":"DELETED","object":` + evaluatorJSON + "}",
		`{"type":"BOOKMARK","object":{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}}`,
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}}`,
		`{"type":"ADDED","object":{"kind":`,
		`{"type":"SURPRISE","object":{}}`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		w := newStreamWatch(io.NopCloser(bytes.NewReader(stream)), jsonEvents(func(dec *json.Decoder) (watch.Event, error) { return decodeOwnerEvent(dec, nil) }))
		defer w.Stop()
		checkEvents[*Owner](t, drain(t, w))
	})
}
