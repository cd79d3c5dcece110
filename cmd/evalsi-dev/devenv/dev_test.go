package devenv

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"evals.si/operator/render"
)

// TestDevBringsExamplesToReady runs the development environment until every example resource is Ready, as `make dev`
// does on a fresh machine.
func TestDevBringsExamplesToReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var last []Row
	err := Run(ctx, Options{
		Render: render.Options{DefaultImage: "evalsi/platform:dev", VLLMImage: "vllm/vllm-openai:v0.11.0", SandboxNamespace: "evalsi-sandbox", APIURL: "http://evalsid:8080"}, GPUs: "8", KEDA: true,
		Until: func(rows []Row) bool {
			last = rows
			if len(rows) < 8 {
				return false
			}
			for _, r := range rows {
				if r.Ready != "True" {
					return false
				}
			}
			return true
		},
	}, &out)
	if err != nil {
		t.Fatalf("dev: %v\n%s", err, out.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("examples not Ready: %+v\n%s", last, out.String())
	}
	for _, want := range []string{"admission webhook serving on", "admission policies applied", "export KUBECONFIG=", "CheckpointServer", "adapter-step-900", "Evaluator", "judge", "EvalRun", "step-900-smoke", "team-a-toxicity", "prod-traces",
		"every run's result is SIMULATED", "(simulated: the reference evalsid ran no evaluator"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
