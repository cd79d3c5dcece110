package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Image is a one-layer image the tests build without a registry or an image builder: files
// (path in the image -> path on this machine) under an entrypoint, run as user.
type Image struct {
	Ref        string
	Files      map[string]string
	Entrypoint []string
	User       string
}

// writeArchive writes img as an OCI image layout archive, which `ctr images import` takes.
func (img Image) writeArchive(path string) error {
	var layer, diff bytes.Buffer
	gz := gzip.NewWriter(&layer)
	dests := slices.Sorted(maps.Keys(img.Files))
	for _, w := range []*tar.Writer{tar.NewWriter(gz), tar.NewWriter(&diff)} {
		for _, dest := range dests {
			data, err := os.ReadFile(img.Files[dest])
			if err != nil {
				return fmt.Errorf("image %s: %w", img.Ref, err)
			}
			hdr := &tar.Header{Name: strings.TrimPrefix(dest, "/"), Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}
			if err := w.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := w.Write(data); err != nil {
				return err
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	if err := gz.Close(); err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": img.Entrypoint, "User": img.User},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(diff.Bytes())}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer.Bytes())},
	})
	if err != nil {
		return err
	}
	top := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	top["annotations"] = map[string]string{"org.opencontainers.image.ref.name": img.Ref, "io.containerd.image.name": img.Ref}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{top}})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	type entry struct {
		name string
		data []byte
	}
	entries := []entry{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {"index.json", index}}
	for _, blob := range [][]byte{config, manifest, layer.Bytes()} {
		entries = append(entries, entry{"blobs/sha256/" + strings.TrimPrefix(digest(blob), "sha256:"), blob})
	}
	for _, e := range entries {
		if err := w.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := w.Write(e.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}
