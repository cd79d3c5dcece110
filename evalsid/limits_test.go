package evalsid_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"evals.si/operator/evalsid"
)

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestLargeRequestRefused sends evalsid a 64 MiB request, once with its length declared and once
// streamed (chunked, no length), with a valid token: both are refused, and the server's heap does
// not grow by the size of the body.
func TestLargeRequestRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := evalsid.New(map[string]string{"tok": "system:serviceaccount:team-a:evalsi-operator"}, evalsid.Schedule{})
	base := serveLoopback(t, ctx, srv)
	url := base + "/evalsi.v1.RunService/CreateRun"
	const size = 64 << 20
	// The body is generated, never held by the client: client and server share this process's heap,
	// and a 64 MiB buffer the transport still writes from would be counted against the server.
	for _, name := range []string{"with Content-Length", "streamed"} {
		t.Run(name, func(t *testing.T) {
			before := heapInUse()
			// A reader of unknown length is sent chunked unless the length is declared below.
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, struct{ io.Reader }{io.LimitReader(zeros{}, size)})
			if err != nil {
				t.Fatal(err)
			}
			if name == "with Content-Length" {
				req.ContentLength = size
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Fatalf("a %d-byte request was answered 200: %s", size, msg)
				}
				t.Logf("refused: %s %s", resp.Status, strings.TrimSpace(string(msg)))
			} else {
				// The server may close the connection while the client still sends.
				t.Logf("refused: %v", err)
			}
			// The body must not have been held: allow a few MiB of noise, far below 64.
			if grew := int64(heapInUse()) - int64(before); grew > 8<<20 {
				t.Errorf("the heap grew by %d MiB for a refused request", grew>>20)
			}
		})
	}
}

// zeros reads as an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestAuthenticatedBeforeDecoded sends a body that is not a message: without a valid token it is
// refused as Unauthenticated before anything decodes it (decoding first said InvalidArgument,
// which tells an anonymous caller the server parsed what it sent); with one it is InvalidArgument.
func TestAuthenticatedBeforeDecoded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := evalsid.New(map[string]string{"tok": "system:serviceaccount:team-a:evalsi-operator"}, evalsid.Schedule{})
	base := serveLoopback(t, ctx, srv)
	url := base + "/evalsi.v1.RunService/CreateRun"
	for token, want := range map[string]int{"": http.StatusUnauthorized, "forged": http.StatusUnauthorized, "tok": http.StatusBadRequest} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{not a message"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: %d %s, want %d", token, resp.StatusCode, body, want)
		}
	}
}
