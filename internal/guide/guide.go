// Package guide reads the shell blocks of docs/install.md, which the guide tests run as written.
package guide

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Blocks returns the ```sh blocks of the section titled title (a "## " heading) of the Markdown
// file path, in order, with their list indentation removed.
func Blocks(path, title string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var blocks []string
	var in, fenced bool
	var block strings.Builder
	indent := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## "+title
		case !in:
		case !fenced && trimmed == "```sh":
			fenced, indent = true, line[:strings.Index(line, "`")]
			block.Reset()
		case fenced && trimmed == "```":
			fenced = false
			blocks = append(blocks, block.String())
		case fenced:
			block.WriteString(strings.TrimPrefix(line, indent) + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s has no sh block under %q", path, title)
	}
	return blocks, nil
}

// Run runs a block as a reader pastes it into bash, stopping at the first failing command
// (errexit, nounset, pipefail), in dir with env, and returns what it printed.
func Run(ctx context.Context, block, dir string, env []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
	cmd.Dir, cmd.Env = dir, env
	return cmd.CombinedOutput()
}
