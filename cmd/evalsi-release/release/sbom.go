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

// spdxRef is an SPDX package's external reference (a purl).
type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

// spdxPackage is a package of an SPDX 2.3 document.
type spdxPackage struct {
	SPDXID           string    `json:"SPDXID"`
	Name             string    `json:"name"`
	VersionInfo      string    `json:"versionInfo"`
	DownloadLocation string    `json:"downloadLocation"`
	FilesAnalyzed    bool      `json:"filesAnalyzed"`
	Checksums        []any     `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef `json:"externalRefs"`
}

// writeBinarySBOM writes an SPDX 2.3 JSON document next to the Go binary bin (bin.spdx.json):
// the main module and every module linked into it, with versions and sums, as the binary's
// build information records them.
func writeBinarySBOM(bin, version string) error {
	pkgs, goVersion, err := goPackages(bin, version)
	if err != nil {
		return err
	}
	return writeSPDX(bin+".spdx.json", filepath.Base(bin)+"-"+version, goVersion, pkgs)
}

// writeImageSBOM writes the SPDX document of the operator image to file: the image, its Debian
// packages (dpkg-query lines "name<TAB>version<TAB>architecture", as run in the image) and the
// modules of the binary bin that it holds.
func writeImageSBOM(file, version, dpkg, bin string) error {
	pkgs := []spdxPackage{{Name: ImageName, VersionInfo: version, DownloadLocation: "NOASSERTION",
		ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:oci/" + ImageName + "?tag=" + version}}}}
	for line := range strings.Lines(dpkg) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if len(f) != 3 {
			continue
		}
		pkgs = append(pkgs, spdxPackage{Name: f[0], VersionInfo: f[1], DownloadLocation: "NOASSERTION",
			ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:deb/debian/" + f[0] + "@" + f[1] + "?arch=" + f[2]}}})
	}
	if len(pkgs) == 1 {
		return fmt.Errorf("the image lists no Debian packages: %q", dpkg)
	}
	mods, goVersion, err := goPackages(bin, version)
	if err != nil {
		return err
	}
	return writeSPDX(file, ImageName+"-image-"+version, goVersion, append(pkgs, mods...))
}

// goPackages are the main module of the Go binary bin, at version, and the modules linked into
// it; and the Go version that built it.
func goPackages(bin, version string) ([]spdxPackage, string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, "", fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	pkgs := []spdxPackage{{Name: info.Main.Path, VersionInfo: version, DownloadLocation: "NOASSERTION",
		ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + info.Main.Path + "@" + version}}}}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		p := spdxPackage{Name: d.Path, VersionInfo: d.Version, DownloadLocation: "NOASSERTION",
			ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + d.Path + "@" + d.Version}}}
		if h, ok := strings.CutPrefix(d.Sum, "h1:"); ok {
			p.Checksums = []any{map[string]string{"algorithm": "SHA256", "checksumValue": goSumHex(h)}}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, info.GoVersion, nil
}

// writeSPDX writes an SPDX 2.3 JSON document named name to file: the first package is what the
// document describes, and it depends on each of the others.
func writeSPDX(file, name, goVersion string, pkgs []spdxPackage) error {
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	var rels []rel
	for i := range pkgs {
		pkgs[i].SPDXID = fmt.Sprintf("SPDXRef-Package-%d", i)
		if i == 0 {
			rels = append(rels, rel{"SPDXRef-DOCUMENT", "DESCRIBES", pkgs[0].SPDXID})
			continue
		}
		rels = append(rels, rel{pkgs[0].SPDXID, "DEPENDS_ON", pkgs[i].SPDXID})
	}
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              name,
		"documentNamespace": "https://evals.si/spdx/" + name,
		"creationInfo": map[string]any{
			"created":  time.Now().UTC().Format(time.RFC3339),
			"creators": []string{"Tool: evalsi-release", "Tool: " + goVersion},
		},
		"packages":      pkgs,
		"relationships": rels,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// goSumHex turns the base64 of a go.sum "h1:" hash (SHA-256) into hex, SPDX's checksum form.
func goSumHex(b64 string) string {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return ""
	}
	return hex.EncodeToString(raw)
}
