// Command evalsi-release builds a release's artifacts (internal/release). `build` is what the
// release workflow runs before it signs keylessly and publishes; `dry-run` rehearses a release on
// this machine with nothing published: it builds, signs every binary and chart package with a
// throwaway key using the pinned cosign, and verifies each signature.
//
//	go run ./cmd/evalsi-release dry-run --version v0.2.0 --out dist/v0.2.0
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"evals.si/operator/cluster"
	"evals.si/operator/internal/release"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "build" && os.Args[1] != "dry-run") {
		fmt.Fprintln(os.Stderr, "usage: evalsi-release build|dry-run --version vX.Y.Z [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	version := fs.String("version", "", "the release's version, vMAJOR.MINOR.PATCH")
	commit := fs.String("commit", "", "the revision (default: git rev-parse HEAD)")
	digest := fs.String("image-digest", "", "digest of the platform image built for the release (sha256:...)")
	imageRepo := fs.String("image-repository", "evalsi/platform", "where the platform image is published")
	chartRepo := fs.String("chart-repository", "<registry>/evalsi/charts", "the OCI repository of the charts")
	identity := fs.String("identity", "", "the repository URL that keyless signatures name (default: the origin remote)")
	out := fs.String("out", "dist", "directory of the artifacts")
	platforms := fs.String("platforms", strings.Join(release.Platforms, ","), "the binaries' platforms, os/arch separated by commas")
	fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], release.Options{
		Version: *version, Commit: *commit, ImageDigest: *digest, Out: *out, Identity: *identity,
		Platforms: strings.Split(*platforms, ","),
		Tested:    release.Tested{ImageRepository: *imageRepo, ChartRepository: *chartRepo},
	}); err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, mode string, opts release.Options) error {
	var err error
	if opts.Repo, err = os.Getwd(); err != nil {
		return err
	}
	if opts.Commit == "" {
		opts.Commit = gitOutput(ctx, "rev-parse", "HEAD")
	}
	if opts.Identity == "" {
		opts.Identity = strings.TrimSuffix(gitOutput(ctx, "config", "--get", "remote.origin.url"), ".git")
	}
	if opts.Helm, err = cluster.Helm(ctx, os.Stderr); err != nil {
		return err
	}
	if opts.Tested, err = release.WhatTestsRun(ctx, opts.Tested); err != nil {
		return err
	}
	artifacts, err := release.Build(ctx, opts)
	if err != nil {
		return err
	}
	if mode == "build" {
		fmt.Printf("built %d artifacts and the notes in %s\n", len(artifacts), opts.Out)
		return nil
	}
	cosign, err := cluster.Cosign(ctx, os.Stderr)
	if err != nil {
		return err
	}
	key, err := release.GenerateKey(ctx, cosign, filepath.Join(opts.Out, "throwaway"))
	if err != nil {
		return err
	}
	for _, a := range artifacts {
		if err := release.SignBlob(ctx, cosign, key, a); err != nil {
			return err
		}
		if err := release.VerifyBlob(ctx, cosign, key, a); err != nil {
			return fmt.Errorf("the signature just made does not verify: %w", err)
		}
		fmt.Printf("signed and verified %s\n", filepath.Base(a))
	}
	fmt.Printf("dry run of %s: %d artifacts signed with a throwaway key and verified; nothing published; notes in %s\n",
		opts.Version, len(artifacts), filepath.Join(opts.Out, "RELEASE_NOTES.md"))
	return nil
}

func gitOutput(ctx context.Context, args ...string) string {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
