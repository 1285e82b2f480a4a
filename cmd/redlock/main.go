// Command redlock runs jobs under a Redlock lock, shows who holds a lock, and
// demonstrates the algorithm.
//
//	redlock run [flags] NAME -- COMMAND [ARGS...]   run COMMAND while holding the lock NAME
//	redlock status [flags] NAME                     show the lock NAME on every node
//	redlock elect [flags] NAME -- COMMAND [ARGS...] run COMMAND while leading the election NAME
//	redlock demo [--nodes N]                        run a demonstration on in-process Redis nodes
//
// See docs/cli.md for the exit codes, the environment and examples.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

const usage = `redlock: distributed locks over independent Redis nodes

Usage:
  redlock run [flags] NAME -- COMMAND [ARGS...]   run COMMAND while holding the lock NAME
  redlock status [flags] NAME                     show the lock NAME on every node
  redlock elect [flags] NAME -- COMMAND [ARGS...] run COMMAND while leading the election NAME
  redlock demo [--nodes N]                        run a demonstration on embedded in-process Redis nodes

The nodes are independent Redis instances, given with --nodes or REDLOCK_NODES as
comma-separated URLs: redis://[user[:password]@]host[:port][/db], or rediss:// for TLS.

Examples:
  redlock demo
  redlock demo --nodes 3
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  redlock run nightly-report -- ./report.sh --date today
  redlock status nightly-report

Exit status of redlock run:
  N     COMMAND's exit status (128+N if signal N killed it)
  1     the lock was lost while COMMAND ran, and COMMAND exited 0
  2     usage error: the command line does not parse
  69    not acquired: failed nodes (unreachable, refusing the password, timing
        out, quarantined) made a majority impossible; COMMAND did not run
  75    not acquired: the lock is held by another owner; COMMAND did not run
  78    bad configuration: node URLs, credentials or TLS files, option values
  126   COMMAND could not be started
  127   COMMAND not found
  128+N redlock got signal N while waiting for the lock

Run "redlock COMMAND --help" for the flags of a command, "redlock --version" for
the version.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" && args[1] != "help" {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	case "demo":
		return demoCmd(args[1:], stdout, stderr)
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "status":
		return statusCmd(args[1:], stdout, stderr)
	case "elect": // elect.go
		return electCmd(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func demoCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", stderr)
	nodes := fs.Int("nodes", 5, "number of embedded Redis nodes (1 to 9)")
	help := "Usage: redlock demo [--nodes N]\n\n" +
		"Runs several workers against embedded in-process Redis nodes (no setup) and prints\n" +
		"what happens: workers contending, nodes killed, a holder paused past its lease, and\n" +
		"a fenced resource refusing the paused holder's stale write.\n\n" +
		"Flags:\n" + flagHelp(fs) +
		"\nExamples:\n  redlock demo\n  redlock demo --nodes 3\n"
	if code, ok := parseFlags(fs, "demo", args, help, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "demo", "unexpected argument %q", fs.Arg(0))
	}
	if *nodes < 1 || *nodes > 9 {
		fmt.Fprintf(stderr, "redlock demo: --nodes %d: must be between 1 and 9\n", *nodes)
		return 2
	}
	if err := demo(stdout, *nodes); err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 1
	}
	return 0
}

// newFlagSet returns a flag set that reports its errors on stderr and leaves
// printing the help to parseFlags.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs. On --help it prints help on stdout and returns
// (0, false); on a bad flag (already reported by the flag package) it prints a
// hint and returns (2, false).
func parseFlags(fs *flag.FlagSet, cmd string, args []string, help string, stdout, stderr io.Writer) (int, bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, help)
		return 0, false
	default:
		fmt.Fprintf(stderr, "Run \"redlock %s --help\" for usage.\n", cmd)
		return 2, false
	}
}

// parseNamed parses "[flags] NAME [flags] [--] [REST...]": flags are accepted
// before and after NAME; what follows the first non-flag argument after NAME,
// or "--", is returned as rest.
func parseNamed(fs *flag.FlagSet, cmd string, args []string, help string, stdout, stderr io.Writer) (name string, rest []string, code int, ok bool) {
	if code, ok := parseFlags(fs, cmd, args, help, stdout, stderr); !ok {
		return "", nil, code, false
	}
	if fs.NArg() == 0 {
		return "", nil, usageError(stderr, cmd, "missing the lock NAME"), false
	}
	name = fs.Arg(0)
	dashBefore := dashAt(args, fs.Args())
	after := fs.Args()[1:]
	if code, ok := parseFlags(fs, cmd, after, help, stdout, stderr); !ok {
		return "", nil, code, false
	}
	if strings.TrimSpace(name) == "" {
		return "", nil, usageError(stderr, cmd, "empty lock NAME"), false
	}
	if dashBefore && fs.NArg() > 0 && !dashAt(after, fs.Args()) {
		// "redlock run -- sleep 10" would take the lock "sleep" and run "10".
		return "", nil, usageError(stderr, cmd, "%q given before NAME: write redlock %s [flags] NAME -- COMMAND (or -- NAME -- COMMAND for a NAME that starts with -)", "--", cmd), false
	}
	return name, fs.Args(), 0, true
}

// dashAt reports whether flag parsing of args stopped at a "--" it consumed,
// rest being what it left.
func dashAt(args, rest []string) bool {
	i := len(args) - len(rest) - 1
	return i >= 0 && args[i] == "--"
}

// usageError reports a usage error (a command line that does not parse) and
// returns exit status 2.
func usageError(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "redlock %s: %s\nRun \"redlock %s --help\" for usage.\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}

// configError reports a bad configuration (a command line that parses, or an
// environment, that gives wrong values: node URLs, credential or TLS files,
// option values) and returns exit status 78 (EX_CONFIG).
func configError(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "redlock %s: %s\nRun \"redlock %s --help\" for usage.\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitConfig
}

// flagGiven reports whether the flag name was on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// durationFlag is a time.Duration flag whose error for a number without a
// unit says which unit was probably meant.
type durationFlag struct{ d *time.Duration }

// durationVar defines a duration flag, like fs.DurationVar.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationFlag{p}, name, usage)
}

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("a duration needs a unit: did you mean %ss? (units: ms, s, m, h)", s)
		}
		return errors.New("not a duration: write it like 500ms, 10s, 5m or 1h30m")
	}
	*f.d = d
	return nil
}

// flagHelp lists the flags of fs the way they are typed: --name VALUE.
func flagHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		if _, ok := f.Value.(durationFlag); ok && arg == "value" {
			arg = "duration"
		}
		switch arg {
		case "duration":
			arg = "D"
		case "int":
			arg = "N"
		}
		head := "  --" + f.Name
		if arg != "" {
			head += " " + arg
		}
		fmt.Fprintf(&b, "%-24s %s", head, text)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteByte('\n')
	})
	return b.String()
}

// checkDuration validates a duration flag.
func checkDuration(name string, d time.Duration, allowZero bool) error {
	if d < 0 || (d == 0 && !allowZero) {
		if allowZero {
			return fmt.Errorf("--%s %v: must not be negative", name, d)
		}
		return fmt.Errorf("--%s %v: must be positive", name, d)
	}
	return nil
}

// versionString returns the module version redlock was built from (with the VCS
// revision when built from a checkout) and the Go version.
func versionString() string {
	v := "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if rev != "" && (v == "" || v == "(devel)") {
			v = fmt.Sprintf("(devel) %.12s%s", rev, dirty)
		}
	}
	return fmt.Sprintf("redlock %s %s", v, runtime.Version())
}
