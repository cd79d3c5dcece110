package unstructuredjson

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"evals.si/operator/internal/manifest"
)

// Marshal writes what encoding/json writes, for each kind of value unstructured content holds and
// for the strings and numbers encoding/json treats specially.
func TestMarshalAsEncodingJSON(t *testing.T) {
	for name, v := range map[string]any{
		"nil":             nil,
		"a nil map":       map[string]any(nil),
		"a nil list":      []any(nil),
		"empty":           map[string]any{"m": map[string]any{}, "l": []any{}},
		"keys in order":   map[string]any{"b": int64(1), "a": int32(2), "c": 3, "B": true, "": false},
		"escapes":         "\"\\\b\f\n\r\t\x00\x1f\x7f<>&",
		"invalid UTF-8":   "a\xffb\xc3",
		"line separators": "a\u2028b\u2029c",
		"multibyte":       "é€😀",
		"an escaped key":  map[string]any{"<k>\n": "v"},
		"floats":          []any{0.0, math.Copysign(0, -1), 1.5, -2.25, 1e-6, 9.99e-7, 1e20, 1e21, 123456789.125, 5e-324, math.MaxFloat64},
		"integers":        []any{int64(math.MinInt64), int64(math.MaxInt64), int32(-7), 0},
		"other types":     map[string]any{"strings": []string{"a"}, "typed": map[string]string{"a": "<"}, "uint": uint8(3), "number": json.Number("12.50")},
		"nested":          map[string]any{"spec": map[string]any{"list": []any{map[string]any{"k": nil, "x": []any{"y", 1.0}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			assertSame(t, v)
		})
	}
}

// NaN and the infinities are encoding/json's error, and nothing is encoded.
func TestMarshalUnsupported(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, want := json.Marshal(f)
		if _, err := Marshal(map[string]any{"x": []any{f}}); err == nil || err.Error() != want.Error() {
			t.Errorf("Marshal(%v) error = %v, want %v", f, err, want)
		}
	}
}

// Every rendering in the goldens encodes as encoding/json encodes it.
func TestMarshalGoldens(t *testing.T) {
	for _, obj := range goldenObjects(t) {
		assertSame(t, obj)
	}
}

// FuzzMarshal compares Marshal with encoding/json on documents, strings and numbers.
func FuzzMarshal(f *testing.F) {
	f.Add([]byte(`{"a":[1,"x",{"b":null}],"c":true}`), "k<\u2028\xff", 1.5, int64(-3))
	f.Add([]byte(`[]`), "", 1e-7, int64(0))
	f.Fuzz(func(t *testing.T, doc []byte, s string, x float64, n int64) {
		var decoded any
		_ = json.Unmarshal(doc, &decoded)
		v := map[string]any{"doc": decoded, s: []any{s, x, n}, "x": x}
		got, err := Marshal(v)
		want, wantErr := json.Marshal(v)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("Marshal error %v, encoding/json's %v", err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("Marshal = %s\nencoding/json = %s", got, want)
		}
	})
}

// BenchmarkMarshal encodes the renderings of the goldens, beside encoding/json.
func BenchmarkMarshal(b *testing.B) {
	objs := goldenObjects(b)
	for _, bc := range []struct {
		name    string
		marshal func(any) ([]byte, error)
	}{{"unstructuredjson", Marshal}, {"encoding-json", json.Marshal}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, obj := range objs {
					if _, err := bc.marshal(obj); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func assertSame(t *testing.T, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Marshal(v)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Marshal = %s\nencoding/json = %s", got, want)
	}
}

// goldenObjects returns the objects of the Evaluator renderings' goldens, decoded as unstructured
// content is.
func goldenObjects(t testing.TB) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, name := range []string{"autoscaling", "full", "egress"} {
		docs, err := manifest.Read("../testdata/render/evaluator/"+name+"/output.yaml", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			objs = append(objs, d.Object.Object)
		}
	}
	return objs
}
