// Package evalsidtest injects faults into the reference evalsid, for tests: the next N calls
// failing with a code, a method refused, latency on every call, or the server not answering. It
// is not linked into the operator's binary.
package evalsidtest

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"evals.si/operator/evalsid"
)

// Faults are the failures a test injects into one server (Inject).
type Faults struct {
	mu       sync.Mutex
	failN    int
	failCode connect.Code
	latency  time.Duration
	down     bool
	// refused are methods that fail with a code on every call.
	refused map[string]connect.Code
}

// Inject puts new Faults in front of every call of s, and returns them.
func Inject(s *evalsid.Server) *Faults {
	f := &Faults{}
	s.Hook(f.wrap, f.take)
	return f
}

// Refuse makes every call of method (such as "BatchGetRuns") fail with code; code 0 answers
// them again.
func (f *Faults) Refuse(method string, code connect.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused == nil {
		f.refused = map[string]connect.Code{}
	}
	if code == 0 {
		delete(f.refused, method)
		return
	}
	f.refused[method] = code
}

// FailNext makes the next n calls fail with code.
func (f *Faults) FailNext(n int, code connect.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failCode = n, code
}

// SetLatency delays every call by d.
func (f *Faults) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// SetDown makes the server stop answering (connections are closed) or answer again.
func (f *Faults) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// take returns the injected error for this call of method, if any.
func (f *Faults) take(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code, ok := f.refused[method]; ok {
		return connect.NewError(code, errors.New("injected failure of "+method))
	}
	if f.failN == 0 {
		return nil
	}
	f.failN--
	return connect.NewError(f.failCode, errors.New("injected failure"))
}

// wrap applies latency and downtime in front of h. A down server aborts every request, so the
// client sees the connection fail as it would with the server gone.
func (f *Faults) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		latency, down := f.latency, f.down
		f.mu.Unlock()
		if down {
			panic(http.ErrAbortHandler)
		}
		if latency > 0 {
			select {
			case <-time.After(latency):
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
