package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"evals.si/operator/internal/command"
)

// completionScripts are the shell functions that complete evalsi-operator's commands and flags
// by asking the binary itself (--generate-bash-completion lists the candidates after what has
// been typed).
var completionScripts = map[string]string{
	"bash": `_evalsi_operator() {
  local cur words
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == "-"* ]]; then
    # "--" would end the flags and run the command: ask with "-" for every flag instead.
    [[ "$cur" == "--" ]] && cur="-"
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
    cur="${COMP_WORDS[COMP_CWORD]}"
  else
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o bashdefault -o default -F _evalsi_operator evalsi-operator
`,
	"zsh": `#compdef evalsi-operator
_evalsi_operator() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    # "--" would end the flags and run the command: ask with "-" for every flag instead.
    [[ "$cur" == "--" ]] && cur="-"
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  _describe 'values' opts
}
compdef _evalsi_operator evalsi-operator
`,
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell code that completes evalsi-operator's commands and flags (bash or zsh)",
		ArgsUsage: "bash|zsh",
		Description: `Example:
  source <(evalsi-operator completion bash)
  evalsi-operator completion zsh > "${fpath[1]}/_evalsi-operator"`,
		Action: func(c *cli.Context) error {
			script, ok := completionScripts[c.Args().First()]
			if !ok || c.NArg() != 1 {
				return cli.Exit(fmt.Sprintf("completion: name one shell, bash or zsh (got %q)", c.Args().Slice()), command.ExitUsage)
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}
