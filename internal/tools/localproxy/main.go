// Command localproxy writes a file-based Go module proxy that serves modules of
// this repository, built from the working tree, at the version they would be
// tagged at: with GOPROXY=file://DIR in front of the usual proxy, a module
// outside the repository can require them as a user would, without replace
// directives, before anything is tagged or pushed (the consumer test does).
//
// Usage, from the repository root:
//
//	go -C internal/tools run ./localproxy -o /tmp/proxy . goredis rueidis metrics metrics/otel
//
// Each argument is a module directory, relative to -repo (default ../.., the
// repository root seen from internal/tools, where go -C runs the command; -o is
// best absolute, as a relative one is taken from there too). The proxy
// gets, for each module, DIR/<module path>/@v/list, <version>.info, <version>.mod
// (the go.mod as it is, replace directives included: a consumer ignores them)
// and <version>.zip, made with golang.org/x/mod/zip from the files a tag of the
// working tree would contain: those git tracks or would track (untracked files
// that .gitignore does not exclude), minus nested modules. Outside a git work
// tree, every file of the directory.
//
// Every module is served at -version; without it, at the version of the core
// (github.com/redlock-go/redlock) that the other listed modules require, which
// must be one and the same: a module that required a version the proxy does
// not serve (or a pseudo-version that no tag makes) is an error.
//
// Use GONOSUMDB=github.com/redlock-go/redlock with the proxy: these versions are
// not in the checksum database.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// corePath is the module path of the core module, the one the others require.
const corePath = "github.com/redlock-go/redlock"

func main() {
	log.SetFlags(0)
	log.SetPrefix("localproxy: ")
	out := flag.String("o", "", "directory to write the proxy to (created if missing)")
	repo := flag.String("repo", "../..", "repository root that the module directories are relative to")
	version := flag.String("version", "", "version to serve every module at (default: the core version the modules require)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: localproxy -o DIR [-repo ROOT] [-version vX.Y.Z] MODULE_DIR...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	served, err := write(*out, *repo, *version, flag.Args())
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range served {
		fmt.Printf("%s@%s\t%s\n", m.Path, m.Version, m.Dir)
	}
}

// served is one module written to the proxy.
type served struct {
	Path, Version string
	Dir           string // its directory in the repository
	GoMod         []byte
}

// write writes the modules in dirs (relative to repo) to the proxy directory
// out at version, or at the core version they require when version is empty.
func write(out, repo, version string, dirs []string) ([]served, error) {
	var mods []served
	for _, d := range dirs {
		dir := filepath.Join(repo, filepath.FromSlash(d))
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		p := modfile.ModulePath(gomod)
		if p == "" {
			return nil, fmt.Errorf("%s: no module line in go.mod", dir)
		}
		mods = append(mods, served{Path: p, Dir: dir, GoMod: gomod})
	}
	want, err := coreVersion(mods)
	if err != nil {
		return nil, err
	}
	if version == "" {
		version = want
	}
	if version == "" {
		return nil, errors.New("no -version, and no listed module requires the core")
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Build(version) != "" {
		return nil, fmt.Errorf("version %q is not a canonical semantic version (vX.Y.Z)", version)
	}
	if want != "" && want != version {
		return nil, fmt.Errorf("the modules require the core at %s, not the version served, %s", want, version)
	}
	for i := range mods {
		mods[i].Version = version
		if err := writeModule(out, mods[i]); err != nil {
			return nil, err
		}
	}
	return mods, nil
}

// coreVersion returns the version of the core that the modules require: ""
// when none does, an error when they disagree or require a pseudo-version.
func coreVersion(mods []served) (string, error) {
	var v, by string
	for _, m := range mods {
		f, err := modfile.ParseLax(filepath.Join(m.Dir, "go.mod"), m.GoMod, nil)
		if err != nil {
			return "", err
		}
		for _, r := range f.Require {
			if r.Mod.Path != corePath {
				continue
			}
			if module.IsPseudoVersion(r.Mod.Version) {
				return "", fmt.Errorf("%s requires the core at the pseudo-version %s: no tag can serve it", m.Path, r.Mod.Version)
			}
			if v != "" && r.Mod.Version != v {
				return "", fmt.Errorf("%s requires the core at %s, %s at %s", by, v, m.Path, r.Mod.Version)
			}
			v, by = r.Mod.Version, m.Path
		}
	}
	return v, nil
}

// writeModule writes m's list, .info, .mod and .zip under out.
func writeModule(out string, m served) error {
	ep, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	ev, err := module.EscapeVersion(m.Version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(ep), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, err := moduleFiles(m.Dir)
	if err != nil {
		return err
	}
	var z bytes.Buffer
	if err := zip.Create(&z, module.Version{Path: m.Path, Version: m.Version}, files); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.Version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":       []byte(m.Version + "\n"),
		ev + ".info": info,
		ev + ".mod":  m.GoMod,
		ev + ".zip":  z.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleFiles lists the files of the module in dir that a tag would contain:
// what git tracks or would track there, without nested modules. Outside a git
// work tree, every regular file (golang.org/x/mod/zip's rules for a directory).
func moduleFiles(dir string) ([]zip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	list, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "not a git repository") {
			return dirFiles(dir)
		}
		return nil, fmt.Errorf("git ls-files in %s: %v: %s", dir, err, stderr.Bytes())
	}
	var names []string
	nested := map[string]bool{} // directories of nested modules
	for _, name := range strings.Split(string(list), "\x00") {
		if name == "" {
			continue
		}
		info, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(name)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		} else if err != nil {
			return nil, err
		}
		if !info.Mode().IsRegular() {
			continue // zip.Create refuses symbolic links and the like, as the go command omits them
		}
		if path.Base(name) == "go.mod" && name != "go.mod" {
			nested[path.Dir(name)] = true
		}
		names = append(names, name)
	}
	slices.Sort(names)
	var files []zip.File
	for _, name := range names {
		if inNested(name, nested) {
			continue
		}
		files = append(files, file{dir: dir, name: name})
	}
	return files, nil
}

// inNested reports whether name lies in one of the nested module directories.
func inNested(name string, nested map[string]bool) bool {
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		if nested[d] {
			return true
		}
	}
	return false
}

// dirFiles lists every file of the module in dir, as zip.CreateFromDir would.
func dirFiles(dir string) ([]zip.File, error) {
	var files []zip.File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == dir {
				return nil
			}
			if _, err := os.Lstat(filepath.Join(p, "go.mod")); err == nil || d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			files = append(files, file{dir: dir, name: filepath.ToSlash(rel)})
		}
		return nil
	})
	return files, err
}

// file is a file of the working tree, as golang.org/x/mod/zip reads it.
type file struct{ dir, name string }

func (f file) path() string                 { return filepath.Join(f.dir, filepath.FromSlash(f.name)) }
func (f file) Path() string                 { return f.name }
func (f file) Lstat() (os.FileInfo, error)  { return os.Lstat(f.path()) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.path()) }
