// Command redlock runs jobs under a Redlock lock and demonstrates the algorithm.
//
//	redlock demo     run a demonstration on in-process Redis nodes (no setup)
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `redlock: distributed locks over independent Redis nodes

Usage:
  redlock demo [--nodes N]    run a demonstration on embedded in-process Redis nodes

Examples:
  redlock demo
  redlock demo --nodes 3

Run "redlock COMMAND --help" for the flags of a command.
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
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "demo":
		return demoCmd(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func demoCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 5, "number of embedded Redis nodes (1 to 9)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: redlock demo [--nodes N]\n\nRuns several workers against embedded in-process Redis nodes and prints what happens.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
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
