// Command fugectl is the terminal client for Fuge managers: it shows the
// cluster, namespaces, rings, leases and owners, and creates and deletes
// namespaces and drains owners, through the managers' admin HTTP API.
//
// Run fugectl --help for the commands; cmd/README.md has examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fuge-project/fuge/cmd/internal/admin"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the API refused, or no manager answered
	exitUsage = 2 // the command line is wrong
)

const (
	defaultManager = "127.0.0.1:7402"
	managerEnv     = "FUGE_MANAGER"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, time.Now, os.Stdout, os.Stderr))
}

// command is one fugectl command.
type command struct {
	name  string // "namespaces create"
	args  []string
	help  string
	flags func(*flag.FlagSet, *createFlags) // command flags, if any
	run   func(c *cli, ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{name: "status", help: "role, leader, term and log index; per namespace its owners and arcs per state", run: (*cli).status},
		{name: "cluster", help: "this node's view of raft: role, leader, term, indexes and members", run: (*cli).cluster},
		{name: "namespaces", help: "list the namespaces", run: (*cli).namespaces},
		{name: "namespaces create", args: []string{"NAME"}, flags: createFlagSet,
			help: "create a namespace (zero flags take the manager's defaults)", run: (*cli).createNamespace},
		{name: "namespaces delete", args: []string{"NAME"}, help: "delete a namespace", run: (*cli).deleteNamespace},
		{name: "ring", args: []string{"NS"}, help: "the ring NS is moving toward: each entry's position, owner and index", run: (*cli).ring},
		{name: "leases", args: []string{"NS"}, help: "the lease table: each arc's holder, generation, state and expiry", run: (*cli).leases},
		{name: "owners", args: []string{"NS"}, help: "the live owner sessions, their virtual nodes and last contact", run: (*cli).owners},
		{name: "drain", args: []string{"NS", "OWNER"}, help: "take OWNER out of the ring of NS; its arcs move to the others", run: (*cli).drain},
		{name: envoyBootstrapName, help: envoyBootstrapHelp}, // run by runEnvoyBootstrap, with flags of its own
	}
}

// globals are the flags accepted anywhere on the line.
type globals struct {
	manager   string
	output    string
	timeout   time.Duration
	tokenFile string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.manager, "manager", g.manager, "")
	fs.StringVar(&g.output, "o", g.output, "")
	fs.StringVar(&g.output, "output", g.output, "")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "")
}

// createFlags are the flags of namespaces create.
type createFlags struct {
	ringSize      int
	header        string
	leaseDuration string
}

func createFlagSet(fs *flag.FlagSet, f *createFlags) {
	fs.IntVar(&f.ringSize, "ring-size", 0, "")
	fs.StringVar(&f.header, "header", "", "")
	fs.StringVar(&f.leaseDuration, "lease-duration", "", "")
}

// usageError is a mistake on the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// run executes one command line and returns the exit code. now is the
// clock that "12s ago" is relative to.
func run(ctx context.Context, args []string, getenv func(string) string, now func() time.Time, stdout, stderr io.Writer) int {
	if rest, ok := envoyBootstrapArgs(args); ok {
		return runEnvoyBootstrap(rest, stdout, stderr)
	}
	c, cmd, rest, err := parse(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "fugectl: %v\nRun 'fugectl --help' for usage.\n", err)
		return exitUsage
	}
	c.out, c.errOut, c.now = stdout, stderr, now
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := cmd.run(c, ctx, rest); err != nil {
		fmt.Fprintf(stderr, "fugectl: %v\n", err)
		return exitError
	}
	return exitOK
}

// parse reads the command line into a ready cli, the command and its
// positional arguments.
func parse(args []string, getenv func(string) string) (*cli, command, []string, error) {
	g := globals{manager: getenv(managerEnv), output: "table", timeout: 10 * time.Second, tokenFile: getenv(tokenFileEnv)}
	if g.manager == "" {
		g.manager = defaultManager
	}
	fs := newFlagSet("fugectl")
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, command{}, nil, flagError(err)
	}
	words := fs.Args()
	if len(words) == 0 {
		return nil, command{}, nil, usagef("no command given")
	}
	if words[0] == "help" {
		return nil, command{}, nil, flag.ErrHelp
	}
	var cmd command
	found := false
	for _, c := range commands() {
		name := strings.Fields(c.name)
		if len(words) >= len(name) && strings.Join(words[:len(name)], " ") == c.name &&
			(!found || len(name) > len(strings.Fields(cmd.name))) {
			cmd, found = c, true
		}
	}
	if !found {
		return nil, command{}, nil, usagef("unknown command %q", words[0])
	}
	fs = newFlagSet("fugectl " + cmd.name)
	g.register(fs)
	var cf createFlags
	if cmd.flags != nil {
		cmd.flags(fs, &cf)
	}
	pos, err := parseInterspersed(fs, words[len(strings.Fields(cmd.name)):])
	if err != nil {
		return nil, command{}, nil, flagError(err)
	}
	if len(pos) != len(cmd.args) {
		return nil, command{}, nil, usagef("usage: fugectl %s", strings.Join(append([]string{cmd.name}, cmd.args...), " "))
	}
	for i, a := range pos {
		if a == "" {
			return nil, command{}, nil, usagef("%s is empty", cmd.args[i])
		}
	}
	if g.output != "table" && g.output != "json" {
		return nil, command{}, nil, usagef("-o %q: want table or json", g.output)
	}
	if g.timeout <= 0 {
		return nil, command{}, nil, usagef("--timeout %v: must be positive", g.timeout)
	}
	if cf.ringSize < 0 {
		return nil, command{}, nil, usagef("--ring-size %d: must be positive", cf.ringSize)
	}
	if cf.leaseDuration != "" {
		if d, err := time.ParseDuration(cf.leaseDuration); err != nil || d <= 0 {
			return nil, command{}, nil, usagef("--lease-duration %q: want a positive duration such as 30s", cf.leaseDuration)
		}
	}
	client, err := admin.New(strings.Split(g.manager, ","), nil)
	if err != nil {
		return nil, command{}, nil, usagef("--manager: %v", err)
	}
	if g.tokenFile != "" {
		tok, err := readToken(g.tokenFile)
		if err != nil {
			return nil, command{}, nil, usagef("--token-file: %v", err)
		}
		client.SetToken(tok)
	}
	c := &cli{client: client, json: g.output == "json", timeout: g.timeout, create: cf}
	return c, cmd, pos, nil
}

// tokenFileEnv names the admin token file when --token-file is not given.
const tokenFileEnv = "FUGECTL_TOKEN_FILE"

// readToken reads an admin token file: its first line, trimmed.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return tok, nil
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err.Error()}
}

// parseInterspersed parses flags wherever they stand among the positional
// arguments, which it returns; everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: fugectl [flags] COMMAND [ARGS] [flags]

fugectl shows and changes the state of Fuge managers through their admin
HTTP API.

Commands:
`)
	for _, c := range commands() {
		line := strings.Join(append([]string{c.name}, c.args...), " ")
		if c.flags != nil {
			line += " [--ring-size N] [--header H] [--lease-duration D]"
		}
		fmt.Fprintf(w, "  %s\n\t%s\n", line, c.help)
	}
	fmt.Fprintf(w, `
Flags, anywhere on the line:
  --manager ADDR[,ADDR...]
	admin HTTP addresses of managers, tried in order until one answers
	(default %s; env %s)
  -o, --output FORMAT
	table (aligned columns, for people) or json (the API's answer) (default table)
  --timeout DURATION
	bound on the whole command (default 10s)
  --token-file FILE
	admin token sent as a bearer token, needed for namespace create and
	delete, drain and join when the manager has --admin-token-file
	(env %s)

Flags of namespaces create:
  --ring-size N       ring size R, a power of two (default the manager's: 4096)
  --header H          routing header (default the manager's: X-Fuge-Key)
  --lease-duration D  owner lease T (default the manager's --lease-duration)

Exit status: 0 on success, 1 when a manager refuses or none answers, 2 for a
bad command line.
`, defaultManager, managerEnv, tokenFileEnv)
}
