package podproc

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestSilentAddressAnswersNoDial dials the silent address from several goroutines at once, as a
// probe under a loaded make test would: none may connect or be refused; each must time out.
func TestSilentAddressAnswersNoDial(t *testing.T) {
	addr, stop, err := SilentAddress()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", addr, 700*time.Millisecond)
			if err == nil {
				c.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("dial %d to the silent address: %v, want a timeout", i, err)
		}
	}
}
