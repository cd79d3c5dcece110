package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/reconcile/engine"
	"evals.si/operator/shard"
)

// On the real API server, a write made under a tenure that ended is not sent (the API server
// holds the object as it was); reads, writes within a tenure and writes under none are.
func TestFenceWritesStopsWritesOfAnEndedTenure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kube, _ := fencedClient(t)
	admin := shared.Get(t).Clientset()
	ns := eventsNamespace(t, ctx, admin, "fenced-writes")
	cms, seen := kube.CoreV1().ConfigMaps(ns), admin.CoreV1().ConfigMaps(ns)
	if _, err := seen.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// value is what the API server holds of the ConfigMap kept ("" once it is gone).
	value := func() string {
		cm, err := seen.Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return cm.Data["v"]
	}
	patch := func(v string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := cms.Patch(ctx, "kept", types.MergePatchType, []byte(`{"data":{"v":"`+v+`"}}`), metav1.PatchOptions{})
			return err
		}
	}
	var ended, held shard.Tenure
	ended.Extend(time.Now().Add(-time.Minute), 10*time.Second)
	held.Extend(time.Now(), time.Hour)
	for _, tc := range []struct {
		name   string
		tenure *shard.Tenure
		write  func(context.Context) error
		sent   bool
		// value is what the API server holds of kept after it.
		value string
	}{
		{"a read, ended", &ended, func(ctx context.Context) error { _, err := cms.Get(ctx, "kept", metav1.GetOptions{}); return err }, true, "0"},
		{"a create, ended", &ended, func(ctx context.Context) error {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "made"}}, metav1.CreateOptions{})
			return err
		}, false, "0"},
		{"a patch, ended", &ended, patch("ended"), false, "0"},
		{"an update, ended", &ended, func(ctx context.Context) error {
			_, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "updated"}}, metav1.UpdateOptions{})
			return err
		}, false, "0"},
		{"a delete, ended", &ended, func(ctx context.Context) error { return cms.Delete(ctx, "kept", metav1.DeleteOptions{}) }, false, "0"},
		{"a patch, never extended", &shard.Tenure{}, patch("never"), false, "0"},
		{"a patch, held", &held, patch("held"), true, "held"},
		{"a patch, no tenure (no leader election)", nil, patch("untenured"), true, "untenured"},
	} {
		wctx := ctx
		if tc.tenure != nil {
			wctx = shard.WithTenure(ctx, tc.tenure)
		}
		err := tc.write(wctx)
		switch refused := errors.As(err, new(*engine.TenureOverError)); {
		case tc.sent && err != nil:
			t.Errorf("%s: %v, want it sent", tc.name, err)
		case !tc.sent && !refused:
			t.Errorf("%s: err %v, want a TenureOverError", tc.name, err)
		}
		if got := value(); got != tc.value {
			t.Errorf("%s: the API server holds %q, want %q", tc.name, got, tc.value)
		}
	}
	if _, err := seen.Get(ctx, "made", metav1.GetOptions{}); err == nil {
		t.Error("the ConfigMap created under an ended tenure is on the API server")
	}
}
