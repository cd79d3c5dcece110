// Command evalsi-release builds a release's artifacts (package release, beside it). The release
// workflow runs `binaries`, builds and pushes the image from them with the Dockerfile, then runs
// `charts` with the image's repository and digest, and signs keylessly and publishes. `dry-run`
// rehearses all of it on this machine with nothing published: it builds the image without a daemon,
// pushes it to a loopback registry, and signs and verifies everything with a throwaway key using
// the pinned cosign.
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
	"evals.si/operator/cmd/evalsi-release/release"
)

func main() {
	modes := []string{"binaries", "charts", "dry-run", "push", "images"}
	if len(os.Args) < 2 || !strings.Contains(" "+strings.Join(modes, " ")+" ", " "+os.Args[1]+" ") {
		fmt.Fprintln(os.Stderr, "usage: evalsi-release binaries|charts|dry-run|push|images --version vX.Y.Z [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	version := fs.String("version", "", "the release's version, vMAJOR.MINOR.PATCH")
	commit := fs.String("commit", "", "the revision (default: git rev-parse HEAD)")
	digest := fs.String("image-digest", "", "charts: digest of the operator image the release built and pushed (sha256:...)")
	imageRepo := fs.String("image-repository", "", "charts: where the operator image was pushed, ending in /"+release.ImageName)
	chartRepo := fs.String("chart-repository", "<registry>/evalsi/charts", "the OCI repository of the charts")
	identity := fs.String("identity", "", "the repository URL that keyless signatures name (default: the origin remote)")
	out := fs.String("out", "dist", "directory of the artifacts")
	platforms := fs.String("platforms", strings.Join(release.Platforms, ","), "the binaries' platforms, os/arch separated by commas")
	registry := fs.String("registry", "", "push: the registry the images are pushed under, host[:port][/path]")
	fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], *registry, release.Options{
		Version: *version, Commit: *commit, ImageRepository: *imageRepo, ImageDigest: *digest, ChartRepository: *chartRepo,
		Out: *out, Identity: *identity, Platforms: strings.Split(*platforms, ","),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, mode, registry string, opts release.Options) error {
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
	if mode == "binaries" {
		bins, err := release.Binaries(ctx, opts)
		if err == nil {
			fmt.Printf("built %d binaries with SBOMs in %s\n", len(bins), opts.Out)
		}
		return err
	}
	if mode == "images" {
		tools, err := dryRunTools(ctx)
		if err != nil {
			return err
		}
		archives, err := release.Images(ctx, opts, tools, os.Stdout)
		if err != nil {
			return err
		}
		fmt.Printf("load them with docker load -i, podman load -i or ctr -n k8s.io images import, or copy them into a registry with crane push %s <registry>/<name>:<tag>\n", archives[0])
		return nil
	}
	if mode == "push" {
		tools, err := dryRunTools(ctx)
		if err != nil {
			return err
		}
		if _, err := release.Push(ctx, opts, tools, registry, os.Stdout); err != nil {
			return err
		}
		fmt.Printf("the images' repositories and digests, for helm's --set flags: %s\n", filepath.Join(opts.Out, "images.env"))
		return nil
	}
	if opts.Helm, err = cluster.Helm(ctx, os.Stderr); err != nil {
		return err
	}
	if opts.Tested, err = release.WhatTestsRun(ctx, opts.Tested); err != nil {
		return err
	}
	if mode == "charts" {
		if opts.ImageDigest == "" || opts.ImageRepository == "" {
			return fmt.Errorf("charts: give --image-repository and --image-digest of the image the release pushed")
		}
		pkgs, err := release.PackageCharts(ctx, opts)
		if err != nil {
			return err
		}
		if err := release.CheckChartImages(pkgs, opts.ImageRepository, opts.ImageDigest); err != nil {
			return err
		}
		fmt.Printf("packaged %d charts running %s@%s, and the notes, in %s\n", len(pkgs), opts.ImageRepository, opts.ImageDigest, opts.Out)
		return nil
	}
	tools, err := dryRunTools(ctx)
	if err != nil {
		return err
	}
	if err := release.DryRun(ctx, opts, tools, os.Stdout); err != nil {
		return err
	}
	fmt.Printf("dry run of %s: everything signed with a throwaway key and verified; nothing published; notes in %s\n",
		opts.Version, filepath.Join(opts.Out, "RELEASE_NOTES.md"))
	return nil
}

// dryRunTools finds or installs what the dry run drives: cosign and crane built into the cache,
// buildah and debootstrap from Debian's packages; buildah's store is kept in the cache too.
func dryRunTools(ctx context.Context) (release.Tools, error) {
	var t release.Tools
	var err error
	if t.Cosign, err = cluster.Cosign(ctx, os.Stderr); err != nil {
		return t, err
	}
	if t.Crane, err = cluster.Crane(ctx, os.Stderr); err != nil {
		return t, err
	}
	if t.Debootstrap, err = cluster.DebianTool(ctx, os.Stderr, "debootstrap", "debootstrap", "debian-archive-keyring"); err != nil {
		return t, err
	}
	if t.Buildah.Bin, err = cluster.DebianTool(ctx, os.Stderr, "buildah", "buildah"); err != nil {
		return t, err
	}
	cache, err := cluster.CacheDir()
	if err != nil {
		return t, err
	}
	t.Cache = filepath.Join(cache, "image-build")
	t.Buildah.Root, t.Buildah.RunRoot = filepath.Join(t.Cache, "storage"), filepath.Join(t.Cache, "run")
	return t, os.MkdirAll(t.Cache, 0o755)
}

func gitOutput(ctx context.Context, args ...string) string {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
