package evalsid

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// faults are the failures a test injects: the next N calls failing with a code, latency on every
// call, or the server not answering at all.
type faults struct {
	mu       sync.Mutex
	failN    int
	failCode connect.Code
	latency  time.Duration
	down     bool
	// refused are methods that fail with a code on every call.
	refused map[string]connect.Code
}

func (f *faults) refuse(method string, code connect.Code) {
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

func (f *faults) failNext(n int, code connect.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failCode = n, code
}

func (f *faults) setLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

func (f *faults) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// take returns the injected error for this call of method, if any.
func (f *faults) take(method string) error {
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
func (f *faults) wrap(h http.Handler) http.Handler {
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
