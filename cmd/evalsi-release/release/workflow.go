package release

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
)

// imageEnv is the release workflow's IMAGE, the repository it pushes the operator image to.
var imageEnv = regexp.MustCompile(`^\s*IMAGE:\s*(.+?)\s*$`)

// WorkflowImageName reads the release workflow (.github/workflows/release.yml) and returns the
// last element of the repository it pushes the operator image to.
func WorkflowImageName(workflow string) (string, error) {
	f, err := os.Open(workflow)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := imageEnv.FindStringSubmatch(sc.Text()); m != nil {
			return path.Base(strings.Trim(m[1], `"'`)), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s sets no IMAGE, the repository it pushes the operator image to", workflow)
}
