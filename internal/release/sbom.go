package release

import (
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeSBOM writes an SPDX 2.3 JSON document next to the Go binary bin (bin.spdx.json): the
// main module and every module linked into it, with versions and sums, as the binary's build
// information records them.
func writeSBOM(bin, version string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		SPDXID           string `json:"SPDXID"`
		Name             string `json:"name"`
		VersionInfo      string `json:"versionInfo"`
		DownloadLocation string `json:"downloadLocation"`
		FilesAnalyzed    bool   `json:"filesAnalyzed"`
		Checksums        []any  `json:"checksums,omitempty"`
		ExternalRefs     []ref  `json:"externalRefs"`
	}
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	name := filepath.Base(bin)
	mainID := "SPDXRef-Package-main"
	pkgs := []pkg{{SPDXID: mainID, Name: info.Main.Path, VersionInfo: version, DownloadLocation: "NOASSERTION",
		ExternalRefs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + info.Main.Path + "@" + version}}}}
	rels := []rel{{"SPDXRef-DOCUMENT", "DESCRIBES", mainID}}
	for i, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		id := fmt.Sprintf("SPDXRef-Package-%d", i)
		p := pkg{SPDXID: id, Name: d.Path, VersionInfo: d.Version, DownloadLocation: "NOASSERTION",
			ExternalRefs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + d.Path + "@" + d.Version}}}
		if h, ok := strings.CutPrefix(d.Sum, "h1:"); ok {
			p.Checksums = []any{map[string]string{"algorithm": "SHA256", "checksumValue": goSumHex(h)}}
		}
		pkgs = append(pkgs, p)
		rels = append(rels, rel{mainID, "DEPENDS_ON", id})
	}
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              name + "-" + version,
		"documentNamespace": "https://evals.si/spdx/" + name + "-" + version,
		"creationInfo": map[string]any{
			"created":  time.Now().UTC().Format(time.RFC3339),
			"creators": []string{"Tool: evalsi-release", "Tool: " + info.GoVersion},
		},
		"packages":      pkgs,
		"relationships": rels,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(bin+".spdx.json", append(b, '\n'), 0o644)
}

// goSumHex turns the base64 of a go.sum "h1:" hash (SHA-256) into hex, SPDX's checksum form.
func goSumHex(b64 string) string {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return ""
	}
	return hex.EncodeToString(raw)
}
