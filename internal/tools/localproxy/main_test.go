package main

import (
	"archive/zip"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository root, seen from this package's directory.
const repoRoot = "../../.."

// published are the directories of the modules a user can go get, relative to
// the repository root: the core and the adapters (testdata/consumer uses each).
var published = []string{".", "goredis", "rueidis", "metrics", "metrics/otel"}

// command is the module of the command that users go install.
const command = "cmd/redlock"

// TestConsumer builds and vets a module outside the repository that requires
// the core and every adapter module at the version they would be tagged at,
// served by a local file proxy built from the working tree, with no replace
// directive: what go get does for a user once the tags exist. It also checks
// that the consumer's module graph stays free of what only the demo and the
// simulation use, and installs the command with go install ...@version, which
// refuses a module whose go.mod has a replace directive.
func TestConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module against the local proxy and the network's: not in -short")
	}
	proxy := t.TempDir()
	mods, err := write(proxy, repoRoot, "", append(published, command))
	if err != nil {
		t.Fatal(err)
	}
	cmd := mods[len(mods)-1]
	mods = mods[:len(mods)-1]

	consumer := t.TempDir() // outside the repository: no go.work, no replace reaches it
	src, err := os.ReadFile(filepath.Join("testdata", "consumer", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var gomod strings.Builder
	gomod.WriteString("module example.com/consumer\n\ngo 1.26.0\n\nrequire (\n")
	for _, m := range mods {
		gomod.WriteString("\t" + m.Path + " " + m.Version + "\n")
	}
	gomod.WriteString(")\n")
	for name, data := range map[string][]byte{"go.mod": []byte(gomod.String()), "main.go": src} {
		if err := os.WriteFile(filepath.Join(consumer, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The main module cache's download directory is a proxy too: it serves the
	// third-party modules the repository's own tests fetched, so that the
	// network is asked only for what they did not. The consumer has a module
	// cache of its own, so that a version built from an earlier working tree
	// is never reused; -trimpath keeps that cache's path out of the build
	// cache's keys, so that the third-party packages compile only once. Built
	// with the flags this test binary was built with (-race under test.sh,
	// which also builds every module with -trimpath), the consumer reuses the
	// packages the modules' tests compiled: go-redis, rueidis, Prometheus and
	// OpenTelemetry are not compiled a second time (on 2 cores and a cold
	// build cache: 8 s for the build instead of 79 s). What the check proves
	// does not depend on -race: module resolution and type-checking are the
	// same.
	flags := "-mod=mod -trimpath"
	if raceEnabled {
		flags += " -race"
	}
	goproxy := goEnv(t, "GOPROXY")
	cache := filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download")
	modcache := t.TempDir()
	t.Cleanup(func() { // the module cache is read-only
		cmd := exec.Command("go", "clean", "-modcache")
		cmd.Env = append(os.Environ(), "GOMODCACHE="+modcache)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go clean -modcache: %v\n%s", err, out)
		}
	})
	env := append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(cache)+","+goproxy,
		"GONOSUMDB="+corePath, // versions not (yet) in the checksum database
		"GOMODCACHE="+modcache,
		"GOFLAGS="+flags,
		"GOWORK=off",
		"GOTOOLCHAIN=local",
	)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = consumer, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "./...")
	run("vet", "./...")

	list := run("list", "-m", "-f", "{{.Path}} {{.Version}} {{if .Replace}}replaced{{end}}", "all")
	for _, m := range mods {
		if want := m.Path + " " + m.Version + " \n"; !strings.Contains(list, want) {
			t.Errorf("go list -m all lacks %q:\n%s", want, list)
		}
	}
	if strings.Contains(list, "replaced") {
		t.Errorf("a module is replaced in the consumer:\n%s", list)
	}
	gobin := t.TempDir()
	env = append(env, "GOBIN="+gobin)
	run("install", cmd.Path+"@"+cmd.Version)
	if _, err := os.Stat(filepath.Join(gobin, "redlock")); err != nil {
		t.Errorf("go install %s@%s: %v", cmd.Path, cmd.Version, err)
	}

	graph := run("mod", "graph")
	for _, heavy := range []string{"github.com/alicebob/miniredis", "github.com/yuin/gopher-lua", "github.com/ory/dockertest"} {
		if strings.Contains(graph, heavy) {
			t.Errorf("the consumer's module graph has %s:\n%s", heavy, grep(graph, heavy))
		}
	}
}

// TestProxyLayout checks what the proxy serves for the core: its go.mod as it
// is, a zip of its own files only (no nested module, no .git), the list.
func TestProxyLayout(t *testing.T) {
	proxy := t.TempDir()
	mods, err := write(proxy, repoRoot, "v0.1.0", []string{"."})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 1 || mods[0].Path != corePath {
		t.Fatalf("served %+v", mods)
	}
	dir := filepath.Join(proxy, filepath.FromSlash(corePath), "@v")
	list, err := os.ReadFile(filepath.Join(dir, "list"))
	if err != nil || string(list) != "v0.1.0\n" {
		t.Errorf("list: %q, %v", list, err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "v0.1.0.mod"))
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mod, own) {
		t.Errorf(".mod differs from go.mod:\n%s", mod)
	}
	zr, err := zip.OpenReader(filepath.Join(dir, "v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	names := map[string]bool{}
	for _, f := range zr.File {
		name, ok := strings.CutPrefix(f.Name, corePath+"@v0.1.0/")
		if !ok {
			t.Fatalf("%s outside the module's directory", f.Name)
		}
		names[name] = true
		for _, nested := range []string{"goredis/", "sim/", "cmd/redlock/", "faults/", "internal/tools/", ".git/"} {
			if strings.HasPrefix(name, nested) || name+"/" == nested {
				t.Errorf("the core's zip has %s", name)
			}
		}
	}
	for _, want := range []string{"go.mod", "redlock.go", "node/node.go", "internal/history/history.go"} {
		if !names[want] {
			t.Errorf("the core's zip lacks %s", want)
		}
	}
}

// TestRefusesPseudoVersion: a module requiring the core at a version no tag can
// make is reported, not served.
func TestRefusesPseudoVersion(t *testing.T) {
	repo := t.TempDir()
	for dir, gomod := range map[string]string{
		".":       "module " + corePath + "\n\ngo 1.25.0\n",
		"adapter": "module " + corePath + "/adapter\n\ngo 1.25.0\n\nrequire " + corePath + " v0.0.0-00010101000000-000000000000\n\nreplace " + corePath + " => ../\n",
	} {
		if err := os.MkdirAll(filepath.Join(repo, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := write(t.TempDir(), repo, "", []string{".", "adapter"})
	if err == nil || !strings.Contains(err.Error(), "pseudo-version") {
		t.Fatalf("err = %v, want the pseudo-version refused", err)
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
