package release

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"sigs.k8s.io/yaml"
)

// pinImage sets repository and digest in the top-level image block of a chart's values.yaml
// text, leaving every other block (poolImage, the pool image, is another repository's) and the
// comments as they are. With no digest it changes nothing, but still requires the block.
func pinImage(values, repository, digest string) (string, error) {
	lines := strings.SplitAfter(values, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimRight(l, "\n") == "image:" {
			start = i
			break
		}
	}
	if start < 0 {
		return "", errors.New("values.yaml has no top-level image block")
	}
	var setRepo, setDigest bool
	for i := start + 1; i < len(lines) && strings.HasPrefix(lines[i], "  "); i++ {
		switch {
		case strings.HasPrefix(lines[i], "  repository:"):
			setRepo = true
			if digest != "" {
				lines[i] = "  repository: " + repository + "\n"
			}
		case strings.HasPrefix(lines[i], "  digest:"):
			setDigest = true
			if digest != "" {
				lines[i] = "  digest: \"" + digest + "\"\n"
			}
		}
	}
	if !setRepo || !setDigest {
		return "", errors.New("values.yaml's image block has no repository or no digest to set")
	}
	return strings.Join(lines, ""), nil
}

// pinRunbooks sets prometheus.alerts.runbookURL, in a chart's values.yaml text that has it, to
// url, so that a release's alerts point at the runbooks of its own tag; a chart without it is
// left as it is.
func pinRunbooks(values, url string) string {
	lines := strings.SplitAfter(values, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "    runbookURL: ") {
			lines[i] = "    runbookURL: " + url + "\n"
		}
	}
	return strings.Join(lines, "")
}

// RunbooksURL is the runbooks page of a release's tag in the repository at identity (a URL such
// as https://github.com/org/repo), which its charts' alerts point at.
func RunbooksURL(identity, version string) string {
	return strings.TrimSuffix(identity, "/") + "/blob/" + version + "/docs/runbooks.md"
}

// ChartValues reads the values.yaml of a packaged chart into v.
func ChartValues(pkg string, v any) error {
	f, err := os.Open(pkg)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%s holds no values.yaml", pkg)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
		// A chart package holds <chart>/values.yaml, and its subcharts' deeper down.
		if strings.Count(h.Name, "/") != 1 || path.Base(h.Name) != "values.yaml" {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(data, v); err != nil {
			return fmt.Errorf("%s: values.yaml: %w", pkg, err)
		}
		return nil
	}
}

// ChartImage reads the operator image a packaged chart runs: image.repository and image.digest
// of its values.yaml.
func ChartImage(pkg string) (repository, digest string, err error) {
	var values struct {
		Image struct{ Repository, Digest string }
	}
	if err := ChartValues(pkg, &values); err != nil {
		return "", "", err
	}
	return values.Image.Repository, values.Image.Digest, nil
}

// CheckChartImages fails unless every package runs the operator image repository@digest: the
// image the release built and pushed, not another.
func CheckChartImages(pkgs []string, repository, digest string) error {
	var errs []error
	for _, p := range pkgs {
		repo, d, err := ChartImage(p)
		switch {
		case err != nil:
			errs = append(errs, err)
		case repo != repository || d != digest:
			errs = append(errs, fmt.Errorf("%s runs %s@%s, not the image this release built, %s@%s", path.Base(p), repo, d, repository, digest))
		}
	}
	return errors.Join(errs...)
}
