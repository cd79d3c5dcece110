package cached

import (
	"context"
	"errors"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestServing: the gate opens when the API server answers its probe and is ready, not when it
// only listens.
func TestServing(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"ready":                         {nil, true},
		"connection refused":            {syscall.ECONNREFUSED, false},
		"not ready yet (500)":           {apierrors.NewInternalError(errors.New("[-]poststarthook/crd-informer-synced failed")), false},
		"unavailable (503)":             {apierrors.NewServiceUnavailable("starting"), false},
		"probe forbidden (403)":         {apierrors.NewForbidden(schema.GroupResource{}, "readyz", errors.New("no")), true},
		"probe unauthorized (401)":      {apierrors.NewUnauthorized("token"), true},
		"no answer in time":             {context.DeadlineExceeded, false},
		"refused, wrapped by the probe": {errors.Join(errors.New("get readyz"), syscall.ECONNREFUSED), false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := serving(c.err); got != c.want {
				t.Errorf("serving(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
