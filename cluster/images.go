package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// imageNames are the images `make images` writes under bin/images (each NAME.tar), by the prefix
// of their variables in bin/images/images.env: the operator, and FROM it the stand-in pool image
// and the stand-in vLLM server.
var imageNames = map[string]string{"IMAGE": "evalsi-operator", "POOL_IMAGE": "evalsi-pool-standin", "MODEL_IMAGE": "evalsi-model-standin"}

// BuildImages runs `make images` in the checkout root, as a user does, writing its output to
// progress. One build at a time writes a checkout's bin/images: two test binaries (make dev's,
// the real node's) ask for them side by side.
func BuildImages(ctx context.Context, root string, progress io.Writer) error {
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

// PushImages pushes the archives BuildImages wrote under registry (host:port/path, plain HTTP)
// with crane, and returns the variables of bin/images/images.env for them: each prefix's
// _REPOSITORY and _DIGEST.
func PushImages(ctx context.Context, root, registry string) (map[string]string, error) {
	crane, err := Crane(ctx, io.Discard)
	if err != nil {
		return nil, err
	}
	images := map[string]string{}
	for prefix, name := range imageNames {
		repo := registry + "/" + name
		out, err := exec.CommandContext(ctx, crane, "push", "--insecure", filepath.Join(root, "bin", "images", name+".tar"), repo+":archive").Output()
		if err != nil {
			return nil, fmt.Errorf("crane push %s: %w", name, err)
		}
		_, digest, ok := strings.Cut(strings.TrimSpace(string(out)), "@")
		if !ok {
			return nil, fmt.Errorf("crane push %s printed %q, no digest", name, out)
		}
		images[prefix+"_REPOSITORY"], images[prefix+"_DIGEST"] = repo, digest
	}
	return images, nil
}
