package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

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
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func admissionReview(b *testing.B, spec map[string]any) []byte {
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
			UserInfo:  authenticationv1.UserInfo{Username: "alice"},
			Object:    runtime.RawExtension{Raw: obj},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return data
}
