package harness

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed" // for the LD_PRELOAD source
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	docker "github.com/ory/dockertest/v3/docker"
)

// faketimeSource is the C source of the clock-offset LD_PRELOAD library.
//
//go:embed faketime.c
var faketimeSource []byte

const (
	// ImageRepository is the repository name of the locally built Redis image.
	// Its tag is a hash of the image's inputs.
	ImageRepository = "redlock-test-redis"

	// Label is set to "1" on every image, network and container the harness
	// creates, so leftovers can be found with --filter label=redlock.test=1.
	Label = "redlock.test"

	// redisInImage is where redis-server lives inside the image.
	redisInImage = "/usr/bin/redis-server"
	// preloadInImage is where the clock-offset library lives inside the image.
	preloadInImage = "/usr/lib/faketime-offset.so"
	// loader is the dynamic loader, copied even if ldd does not list it.
	loader = "/lib64/ld-linux-x86-64.so.2"

	dockerfile = "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/usr/bin/redis-server\"]\n"
)

// prereqError reports a missing host prerequisite (redis-server, ldd, gcc).
// Like a missing Docker daemon it makes Start skip rather than fail, unless
// REDLOCK_REQUIRE_DOCKER=1.
type prereqError struct{ err error }

func (e *prereqError) Error() string { return e.err.Error() }
func (e *prereqError) Unwrap() error { return e.err }

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// ensureImage builds the Redis image once per test binary and returns its
// reference ("repository:tag").
func ensureImage(client *docker.Client) (string, error) {
	imageOnce.Do(func() {
		imageRef, imageErr = buildImage(client)
	})
	return imageRef, imageErr
}

// findRedis returns the host's redis-server binary.
func findRedis() (string, error) {
	if st, err := os.Stat(redisInImage); err == nil && !st.IsDir() {
		return redisInImage, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", &prereqError{fmt.Errorf("redis-server not found (tried %s and $PATH): %w", redisInImage, err)}
	}
	return p, nil
}

// sharedLibs lists the absolute paths of the libraries ldd reports for bin,
// including the dynamic loader, in ldd's order, without duplicates.
func sharedLibs(bin string) ([]string, error) {
	if _, err := exec.LookPath("ldd"); err != nil {
		return nil, &prereqError{fmt.Errorf("ldd not found: %w", err)}
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	seen := map[string]bool{}
	var libs []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			libs = append(libs, p)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; "linux-vdso.so.1 (0x...)"
		// has no file.
		if _, rest, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(rest)
		}
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "/") {
			if strings.Contains(line, "not found") {
				return nil, fmt.Errorf("ldd %s: missing library: %s", bin, sc.Text())
			}
			continue
		}
		add(f[0])
	}
	if _, err := os.Stat(loader); err == nil {
		add(loader)
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s listed no libraries:\n%s", bin, out)
	}
	return libs, nil
}

// copyInto copies src (following symlinks) to root+dst with mode 0755 and
// feeds the destination path and the content to h.
func copyInto(h hash.Hash, root, src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	target := filepath.Join(root, filepath.FromSlash(dst))
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "file %s\n", dst)
	if _, err := io.Copy(io.MultiWriter(out, h), in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// buildImage assembles the build context in a fresh temporary directory,
// compiles the LD_PRELOAD library into it, and builds the image with the
// classic builder unless an image with the same input hash already exists.
func buildImage(client *docker.Client) (string, error) {
	redisBin, err := findRedis()
	if err != nil {
		return "", err
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", &prereqError{fmt.Errorf("gcc not found (needed for the clock-offset library): %w", err)}
	}
	libs, err := sharedLibs(redisBin)
	if err != nil {
		return "", err
	}

	dir, err := os.MkdirTemp("", "redlock-redis-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	rootfs := filepath.Join(dir, "rootfs")

	h := sha256.New()
	fmt.Fprintf(h, "dockerfile\n%s", dockerfile)
	if err := copyInto(h, rootfs, redisBin, redisInImage); err != nil {
		return "", err
	}
	for _, lib := range libs {
		if err := copyInto(h, rootfs, lib, lib); err != nil {
			return "", err
		}
	}

	// Compile the preload library outside rootfs/, then copy it in.
	src := filepath.Join(dir, "faketime.c")
	if err := os.WriteFile(src, faketimeSource, 0o644); err != nil {
		return "", err
	}
	so := filepath.Join(dir, "faketime-offset.so")
	cmd := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-Wall", "-o", so, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compile faketime.c: %w\n%s", err, out)
	}
	if err := copyInto(h, rootfs, so, preloadInImage); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return "", err
	}

	tag := hex.EncodeToString(h.Sum(nil))[:16]
	ref := ImageRepository + ":" + tag

	// Never let anything pull: look for the image first, build it if absent.
	_, err = client.InspectImage(ref)
	if err == nil {
		return ref, nil
	}
	if !errors.Is(err, docker.ErrNoSuchImage) {
		return "", fmt.Errorf("inspect image %s: %w", ref, err)
	}

	var out bytes.Buffer
	err = client.BuildImage(docker.BuildImageOptions{
		Name:                ref,
		ContextDir:          dir,
		Dockerfile:          "Dockerfile",
		OutputStream:        &out,
		RmTmpContainer:      true,
		ForceRmTmpContainer: true,
		Labels:              map[string]string{Label: "1"},
		// Version left empty: the classic builder.
	})
	if err != nil {
		return "", fmt.Errorf("build image %s: %w\nbuild output:\n%s", ref, err, tail(out.String(), 4000))
	}
	if _, err := client.InspectImage(ref); err != nil {
		return "", fmt.Errorf("image %s missing after build: %w\nbuild output:\n%s", ref, err, tail(out.String(), 4000))
	}
	return ref, nil
}

// tail returns at most the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
