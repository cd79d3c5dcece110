package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/operator/cluster/clustertest"
)

// TestBashCompletion sources `evalsi-operator completion bash` in bash and completes as a user
// typing would: commands, a command's flags, and "--", which must list flags without running
// the command (it would end the flags and run it: release-finalizers acts on a cluster).
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash, which the completion is for: %v", err)
	}
	bin := clustertest.Operator(t)
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "evalsi-operator")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string
		want []string
		not  []string
	}{
		{line: "evalsi-operator leak", want: []string{"leaked-servers"}, not: []string{"run"}},
		{line: "evalsi-operator leaked-servers --o", want: []string{"--older-than", "--output"}, not: []string{"--kubeconfig"}},
		{line: "evalsi-operator release-finalizers --", want: []string{"--namespace", "--kubeconfig"}},
	} {
		t.Run(tc.line, func(t *testing.T) {
			script := `source <(evalsi-operator completion bash)
COMP_WORDS=(` + tc.line + `); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_evalsi_operator
printf '%s\n' "${COMPREPLY[@]}"`
			cmd := exec.Command(bash, "-c", script)
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "KUBECONFIG="+filepath.Join(dir, "none"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			for _, w := range tc.want {
				if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
					t.Errorf("completions %v lack %s", got, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
					t.Errorf("completions %v offer %s", got, w)
				}
			}
		})
	}
}
