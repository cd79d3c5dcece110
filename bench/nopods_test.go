package bench

import (
	"context"
	"testing"
	"time"
)

// A round without pods (-pods=false) runs in a namespace that refuses every pod: admitNoPods
// fails when its quota lets one in. (The test control plane runs no quota controller; a quota
// whose status it never wrote constrained nothing, and the rounds of 10,000 ran 10,000 pods.)
func TestAdmitNoPods(t *testing.T) {
	env = shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createNamespace(t, ctx, "no-pods")
	admitNoPods(t, ctx, "no-pods")
}
