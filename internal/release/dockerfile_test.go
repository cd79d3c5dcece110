package release

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfile checks the platform base image statically: no daemonless build is possible here
// (the Debian base would have to be pulled from a registry, and this machine reaches none). The
// final stage is a Debian slim base, which has a shell and apt for a plugin image's RUN steps; it
// runs as the non-root user 65532; the entrypoint is the binary at its fixed path; it carries the
// OCI labels source, revision and version; and the build stage cross-compiles for buildx's target
// platform, so one build makes linux/amd64 and linux/arm64.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	stages := regexp.MustCompile(`(?m)^FROM `).Split(text, -1)
	final := "FROM " + stages[len(stages)-1]
	for name, re := range map[string]*regexp.Regexp{
		"a Debian slim base (a shell and apt for RUN steps)": regexp.MustCompile(`(?m)^FROM debian:[a-z]+-slim$`),
		"the non-root user 65532":                            regexp.MustCompile(`(?m)^USER 65532:65532$`),
		"the binary at a fixed path as the entrypoint":       regexp.MustCompile(`(?m)^ENTRYPOINT \["/usr/local/bin/evalsi-operator"\]$`),
		"the binary copied to that path":                     regexp.MustCompile(`(?m)^COPY --from=build /out/evalsi-operator /usr/local/bin/evalsi-operator$`),
		"the user created with a home and no shell login":    regexp.MustCompile(`useradd --uid 65532`),
	} {
		if !re.MatchString(final) {
			t.Errorf("the final stage lacks %s", name)
		}
	}
	for _, label := range []string{"source", "revision", "version"} {
		if !strings.Contains(final, "org.opencontainers.image."+label+"=") {
			t.Errorf("the final stage lacks the OCI label %s", label)
		}
	}
	for _, want := range []string{"FROM --platform=$BUILDPLATFORM", "GOOS=${TARGETOS} GOARCH=${TARGETARCH}", "CGO_ENABLED=0"} {
		if !strings.Contains(text, want) {
			t.Errorf("the build stage lacks %q (multi-arch cross-compilation)", want)
		}
	}
}
