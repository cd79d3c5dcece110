package cluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTrimKeda builds the trimmed copy of KEDA's module and checks that buildScaler keeps the
// metrics-api, cpu and memory cases and KEDA's own error for any other type.
func TestTrimKeda(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	module, err := DownloadModule(ctx, KedaModule, KedaVersion)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "keda")
	if err := trimKeda(module, dst); err != nil {
		t.Fatal(err)
	}
	builder, err := os.ReadFile(filepath.Join(dst, "pkg", "scaling", "scalers_builder.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`case "metrics-api":`, `case "cpu":`, `case "memory":`, `no scaler found for type`} {
		if !strings.Contains(string(builder), want) {
			t.Errorf("the trimmed buildScaler has no %s", want)
		}
	}
	if strings.Contains(string(builder), `case "kafka":`) {
		t.Error("the trimmed buildScaler still builds kafka scalers")
	}
	entries, err := os.ReadDir(filepath.Join(dst, "pkg", "scalers"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() {
			files = append(files, e.Name())
		}
	}
	if want := []string{"cpu_memory_scaler.go", "metrics_api_scaler.go", "scaler.go", "trimmed.go"}; !slices.Equal(files, want) {
		t.Errorf("pkg/scalers holds %v, want %v", files, want)
	}
}

// TestKedaWrapperDir finds cluster/keda from a working directory inside the checkout, as the
// tests and the repository's -trimpath commands run.
func TestKedaWrapperDir(t *testing.T) {
	dir, err := kedaWrapperDir(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if abs, _ := filepath.Abs("keda"); dir != abs {
		t.Errorf("kedaWrapperDir = %s, want %s", dir, abs)
	}
}
