package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"evals.si/operator/cluster"
)

// MakeImages runs `make images` in the checkout root, as a user does, writing its output to
// progress: the three images as archives under bin/images (Images). One build at a time writes a
// checkout's bin/images: two test binaries (make dev's, the real node's) ask for them side by
// side.
func MakeImages(ctx context.Context, root string, progress io.Writer) error {
	dir := filepath.Join(root, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".images.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "images")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, progress, progress
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("make images: %w", err)
	}
	return nil
}

// PushArchives pushes the archives MakeImages wrote in root under registry (host:port/path,
// plain HTTP) with crane, and names what it pushed.
func PushArchives(ctx context.Context, root, registry string) (Pushed, error) {
	crane, err := cluster.Crane(ctx, io.Discard)
	if err != nil {
		return Pushed{}, err
	}
	push := func(name string) (repository, digest string, err error) {
		repository = registry + "/" + name
		out, err := exec.CommandContext(ctx, crane, "push", "--insecure", filepath.Join(root, "bin", "images", name+".tar"), repository+":archive").Output()
		if err != nil {
			return "", "", fmt.Errorf("crane push %s: %w", name, err)
		}
		_, digest, ok := strings.Cut(strings.TrimSpace(string(out)), "@")
		if !ok {
			return "", "", fmt.Errorf("crane push %s printed %q, no digest", name, out)
		}
		return repository, digest, nil
	}
	var p Pushed
	if p.ImageRepository, p.ImageDigest, err = push(ImageName); err != nil {
		return p, err
	}
	if p.PoolImageRepository, p.PoolImageDigest, err = push(PoolStandinName); err != nil {
		return p, err
	}
	p.ModelImageRepository, p.ModelImageDigest, err = push(ModelStandinName)
	return p, err
}

// PoolImage is the pushed pool image by digest.
func (p Pushed) PoolImage() string { return p.PoolImageRepository + "@" + p.PoolImageDigest }

// ModelImage is the pushed stand-in vLLM image by digest.
func (p Pushed) ModelImage() string { return p.ModelImageRepository + "@" + p.ModelImageDigest }
