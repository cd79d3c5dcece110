package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/operator/render"
)

// webhookRate and webhookDuration are the load of BenchmarkWebhookLatency: 200 requests a second,
// as a busy cluster's API server might send, for long enough to see the 99th percentile.
const (
	webhookRate     = 200
	webhookDuration = 5 * time.Second
)

// BenchmarkWebhookLatency sends validating AdmissionReviews of a valid and of an invalid
// CheckpointServer to the webhook over TLS at a steady 200 requests a second and reports the
// latency's median and 99th percentile as the API server sees it (request to response): with
// validation alone (the default), and with the dry run of the children on the real API server.
func BenchmarkWebhookLatency(b *testing.B) {
	needCluster(b)
	ctx := context.Background()
	ensureNamespace(b, ctx, "team-a")
	plain := httptest.NewTLSServer(handler(Validator(Validation{})))
	defer plain.Close()
	dryRun := httptest.NewTLSServer(handler(Validator(Validation{DryRun: &DryRun{Client: env.Dynamic(), Timeout: 2 * time.Second,
		Render: render.Options{VLLMImage: "vllm/vllm-openai:v0.11.0", APIURL: "http://evalsid:8080", Autoscaling: true}}})))
	defer dryRun.Close()
	valid := map[string]any{"model": "/checkpoints/run-1/step-200", "checkpointClaim": "ckpts", "gpus": int64(1),
		"apiKeySecret": map[string]any{"name": "vllm-key"}, "extraArgs": []any{"--max-model-len=8192"}}
	invalid := map[string]any{"model": "/checkpoints/run-1/step-200", "gpus": int64(1), "extraArgs": []any{"--api-key=sk-123"},
		"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": 0.5}}}
	for _, c := range []struct {
		name  string
		srv   *httptest.Server
		spec  map[string]any
		valid bool
	}{
		{"valid", plain, valid, true},
		{"invalid", plain, invalid, false},
		{"valid-dry-run", dryRun, valid, true},
		{"invalid-dry-run", dryRun, invalid, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			body := admissionReview(b, c.spec)
			for range b.N {
				lat := steadyLoad(b, c.srv.Client(), c.srv.URL+ValidatePath, body, c.valid)
				b.ReportMetric(float64(percentile(lat, 50).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(percentile(lat, 99).Microseconds())/1000, "p99-ms")
			}
		})
	}
}

// steadyLoad sends body at webhookRate for webhookDuration, each request on its own schedule (an
// open loop: a slow answer does not delay the next request), and returns every latency.
func steadyLoad(b *testing.B, client *http.Client, url string, body []byte, wantAllowed bool) []time.Duration {
	n := int(webhookRate * webhookDuration / time.Second)
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / webhookRate)))
		go func() {
			t := time.Now()
			resp, err := client.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			var review admissionv1.AdmissionReview
			err = json.NewDecoder(resp.Body).Decode(&review)
			resp.Body.Close()
			lat[i] = time.Since(t)
			if err == nil && review.Response.Allowed != wantAllowed {
				err = fmt.Errorf("allowed = %v, want %v: %v", review.Response.Allowed, wantAllowed, review.Response.Result)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return lat
}

func percentile(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func admissionReview(b *testing.B, spec map[string]any) []byte {
	return admissionReviewOf(b, "alice", spec)
}

// admissionReviewOf is a review of the creation of a CheckpointServer with spec in team-a by
// user.
func admissionReviewOf(b *testing.B, user string, spec map[string]any) []byte {
	obj, err := json.Marshal(map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "CheckpointServer",
		"metadata": map[string]any{"name": "ckpt", "namespace": "team-a"}, "spec": spec,
	})
	if err != nil {
		b.Fatal(err)
	}
	data, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("bench"),
			Operation: admissionv1.Create,
			Namespace: "team-a",
			UserInfo:  authenticationv1.UserInfo{Username: user, Groups: []string{"system:authenticated"}},
			Object:    runtime.RawExtension{Raw: obj},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkWebhookOverload sends validating AdmissionReviews at 1,000 and 2,000 a second for
// five seconds each, after a second of the same to open connections (an open loop, as API
// servers send; each with the API server's ?timeout=5s)
// to the webhook's handler as it serves them (Admission, behind limitConnections), with its
// bounds ("shedding") and, side by side, without any ("unbounded"). It reports the median, 99th percentile and slowest of the
// answers, the reviews shed (429), and the most heap in use while it ran, sampled every 50 ms (the
// load generator runs in the same process and counts too).
func BenchmarkWebhookOverload(b *testing.B) {
	body := admissionReview(b, map[string]any{"model": "/checkpoints/run-1/step-200", "checkpointClaim": "ckpts", "gpus": int64(1),
		"apiKeySecret": map[string]any{"name": "vllm-key"}, "extraArgs": []any{"--max-model-len=8192"}})
	for _, rate := range []int{1000, 2000} {
		for _, c := range []struct {
			name     string
			inFlight int
		}{{"shedding", 0}, {"unbounded", 1 << 20}} {
			b.Run(fmt.Sprintf("%d-per-s/%s", rate, c.name), func(b *testing.B) {
				srv, client := serveAdmission(b, Validation{}, c.inFlight, NewMetrics())
				// A second at the rate first, as an API server's connections are open already.
				openLoad(client, srv.URL+ValidatePath+"?timeout=5s", same(body), rate, time.Second)
				for range b.N {
					res := openLoad(client, srv.URL+ValidatePath+"?timeout=5s", same(body), rate, 5*time.Second)
					b.ReportMetric(float64(percentile(res.served, 50).Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(percentile(res.served, 99).Microseconds())/1000, "p99-ms")
					b.ReportMetric(float64(slices.Max(append(res.served, res.shed...)).Microseconds())/1000, "max-ms")
					b.ReportMetric(float64(len(res.shed)), "shed")
					b.ReportMetric(float64(res.failed), "failed")
					b.ReportMetric(float64(res.peakHeap)/(1<<20), "peak-heap-MiB")
				}
			})
		}
	}
}

// serveAdmission serves v over TLS as the webhook does (Admission with inFlight slots, behind
// limitConnections unless inFlight is set) until the benchmark ends, and returns the server and
// a client that keeps as many connections open as an API server would.
func serveAdmission(b *testing.B, v Validation, inFlight int, m *Metrics) (*httptest.Server, *http.Client) {
	srv := httptest.NewUnstartedServer(Admission(v, inFlight, m))
	if inFlight == 0 {
		srv.Listener = limitConnections(srv.Listener, 0)
	}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	client := srv.Client()
	tr := client.Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4096
	client.Transport = tr
	return srv, client
}

// same is a body for every request.
func same(body []byte) func(int) []byte { return func(int) []byte { return body } }

// loadResult is what openLoad measured: the latencies of the reviews served and of those shed,
// and the most heap in use.
type loadResult struct {
	served, shed []time.Duration
	failed       int
	// refused counts the reviews served with allowed: false.
	refused  int
	peakHeap uint64
}

// openLoad posts body(i), the i-th request's, to url at rate a second for d, each request on its
// own schedule, and waits for every answer.
func openLoad(client *http.Client, url string, body func(i int) []byte, rate int, d time.Duration) loadResult {
	n := rate * int(d/time.Second)
	lat := make([]time.Duration, n)
	codes := make([]int, n)
	allowed := make([]bool, n)
	var wg sync.WaitGroup
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms goruntime.MemStats
		for {
			goruntime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			resp, err := client.Post(url, "application/json", bytes.NewReader(body(i)))
			if err != nil {
				codes[i] = -1
				lat[i] = time.Since(t)
				return
			}
			var review admissionv1.AdmissionReview
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&review) == nil && review.Response != nil {
				allowed[i] = review.Response.Allowed
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i], lat[i] = resp.StatusCode, time.Since(t)
		}()
	}
	wg.Wait()
	close(stop)
	var res loadResult
	for i, c := range codes {
		switch c {
		case http.StatusOK:
			res.served = append(res.served, lat[i])
			if !allowed[i] {
				res.refused++
			}
		case http.StatusTooManyRequests:
			res.shed = append(res.shed, lat[i])
		default:
			res.failed++
		}
	}
	res.peakHeap = peak.Load()
	return res
}

// BenchmarkWebhookReferences sends reviews of CheckpointServers that name a Secret and a claim,
// as a writer with edit in the namespace, to the webhook's handler with Access checking them on
// the real API server (an open loop, as in BenchmarkWebhookOverload, after a second of the same):
// at 1,000 a second naming the same Secret (a GitOps sync), and at 500 a second each naming a
// Secret no review named before (every answer asked). It reports the latencies, the reviews
// shed (429), refused and admitted a second, and how many questions reached the API server, with
// the webhook command's default client limit (--kube-api-qps).
func BenchmarkWebhookReferences(b *testing.B) {
	needCluster(b)
	ctx := context.Background()
	ensureNamespace(b, ctx, "team-a")
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-writer-edits", Namespace: "team-a"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "bench-writer"}}}
	if _, err := env.Clientset().RbacV1().RoleBindings("team-a").Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	spec := func(secret string) map[string]any {
		return map[string]any{"model": "/checkpoints/run-1/step-200", "checkpointClaim": "ckpts", "gpus": int64(1),
			"apiKeySecret": map[string]any{"name": secret}}
	}
	same := admissionReviewOf(b, "bench-writer", spec("vllm-key"))
	var fresh atomic.Int64
	for _, c := range []struct {
		name string
		rate int
		body func(int) []byte
	}{
		{"same-reference-1000-per-s", 1000, func(int) []byte { return same }},
		{"new-reference-500-per-s", 500, func(int) []byte {
			return admissionReviewOf(b, "bench-writer", spec(fmt.Sprintf("key-%d", fresh.Add(1))))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			rc := rest.CopyConfig(env.Config)
			rc.QPS, rc.Burst = DefaultKubeAPIQPS, DefaultKubeAPIBurst
			kube := kubernetes.NewForConfigOrDie(rc)
			m := NewMetrics()
			srv, client := serveAdmission(b, Validation{Access: &Access{Kube: kube, Answers: NewAnswers(0, 0, 0, m)}}, 0, m)
			url := srv.URL + ValidatePath + "?timeout=10s"
			openLoad(client, url, c.body, c.rate, time.Second)
			for range b.N {
				asked := testutil.ToFloat64(m.accessAnswers.WithLabelValues("asked"))
				res := openLoad(client, url, c.body, c.rate, 5*time.Second)
				b.ReportMetric(float64(percentile(res.served, 50).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(percentile(res.served, 99).Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(len(res.shed)), "shed")
				b.ReportMetric(float64(res.failed), "failed")
				b.ReportMetric(float64(res.refused), "refused")
				b.ReportMetric(float64(len(res.served)-res.refused)/5, "admitted/s")
				b.ReportMetric(testutil.ToFloat64(m.accessAnswers.WithLabelValues("asked"))-asked, "asked")
			}
		})
	}
}
