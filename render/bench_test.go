package render

import "testing"

// BenchmarkRenderEvaluator renders an autoscaled Evaluator as admission and `render` do (its
// schema checked) and as a reconcile of a generation the engine has checked does (SpecChecked).
func BenchmarkRenderEvaluator(b *testing.B) {
	obj := readObject(b, "../testdata/render/evaluator/autoscaling/input.yaml")
	for name, checked := range map[string]bool{"schema checked": false, "engine checked": true} {
		b.Run(name, func(b *testing.B) {
			opts := goldenOptions
			opts.SpecChecked = checked
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Object(obj, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
