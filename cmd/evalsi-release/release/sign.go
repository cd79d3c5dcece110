package release

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Key is a cosign key pair on disk.
type Key struct{ Private, Public string }

// GenerateKey makes a throwaway cosign key pair with an empty password at prefix.key and
// prefix.pub, for a dry run.
func GenerateKey(ctx context.Context, cosign, prefix string) (Key, error) {
	os.Remove(prefix + ".key")
	os.Remove(prefix + ".pub")
	if _, err := cosignRun(ctx, cosign, "generate-key-pair", "--output-key-prefix", prefix); err != nil {
		return Key{}, err
	}
	return Key{Private: prefix + ".key", Public: prefix + ".pub"}, nil
}

// SignBlob signs file with key into file.bundle, offline: no transparency-log upload, since a dry
// run publishes nothing.
func SignBlob(ctx context.Context, cosign string, key Key, file string) error {
	_, err := cosignRun(ctx, cosign, "sign-blob", "--yes", "--key", key.Private, "--bundle", file+".bundle",
		"--tlog-upload=false", "--use-signing-config=false", file)
	return err
}

// VerifyBlob checks file against its bundle and key's public half; a changed file fails.
func VerifyBlob(ctx context.Context, cosign string, key Key, file string) error {
	_, err := cosignRun(ctx, cosign, "verify-blob", "--key", key.Public, "--bundle", file+".bundle",
		"--insecure-ignore-tlog=true", file)
	return err
}

// SignImage signs the image ref (repository@digest) where it is pushed, offline; the registry
// may be plain HTTP (a loopback one).
func SignImage(ctx context.Context, cosign string, key Key, ref string) error {
	_, err := cosignRun(ctx, cosign, "sign", "--key", key.Private, "--tlog-upload=false", "--use-signing-config=false",
		"--allow-insecure-registry", ref)
	return err
}

// VerifyImage checks that the image ref carries a signature by key; an image that is not the
// one signed (another digest, or a tag moved to another image) fails.
func VerifyImage(ctx context.Context, cosign string, key Key, ref string) error {
	_, err := cosignRun(ctx, cosign, "verify", "--key", key.Public, "--insecure-ignore-tlog=true", "--allow-insecure-registry", ref)
	return err
}

// AttestSBOM attaches the SPDX document sbom to the image ref as an attestation signed by key.
func AttestSBOM(ctx context.Context, cosign string, key Key, ref, sbom string) error {
	_, err := cosignRun(ctx, cosign, "attest", "--key", key.Private, "--type", "spdxjson", "--predicate", sbom,
		"--tlog-upload=false", "--use-signing-config=false", "--allow-insecure-registry", ref)
	return err
}

// VerifySBOM checks the image ref's SPDX attestation against key.
func VerifySBOM(ctx context.Context, cosign string, key Key, ref string) error {
	_, err := cosignRun(ctx, cosign, "verify-attestation", "--key", key.Public, "--type", "spdxjson",
		"--insecure-ignore-tlog=true", "--allow-insecure-registry", ref)
	return err
}

func cosignRun(ctx context.Context, cosign string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, cosign, args...)
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=", "COSIGN_YES=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
