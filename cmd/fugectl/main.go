// Command fugectl is the terminal client for Fuge managers: it shows the
// cluster, namespaces, rings, leases and owners, and creates and deletes
// namespaces and drains owners, through the managers' admin HTTP API, over
// mutual TLS with an admin certificate. It also makes the certificates
// (certs init, certs issue) and Envoy's bootstrap.
//
// Run fugectl --help for the commands; cmd/README.md has examples.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fuge-project/fuge/cmd/internal/admin"
	"github.com/fuge-project/fuge/fugetls"
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
	name      string // "namespaces create"
	args      []string
	help      string
	flags     func(*flag.FlagSet, *cmdFlags) // command flags, if any
	flagsHelp string                         // how they read in the usage line
	local     bool                           // talks to no manager
	run       func(c *cli, ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{name: "status", help: "role, leader, term and log index; per namespace its owners and arcs per state", run: (*cli).status},
		{name: "cluster", help: "this node's view of raft: role, leader, term, indexes and members", run: (*cli).cluster},
		{name: "namespaces", help: "list the namespaces", run: (*cli).namespaces},
		{name: "namespaces create", args: []string{"NAME"}, flags: createFlagSet,
			flagsHelp: "[--ring-size N] [--header H] [--lease-duration D] [--balance off|seeds|fit] [--balance-interval D]",
			help: "create a namespace (zero flags take the manager's defaults; --balance picks the load-balancing policy,\n" +
				"\tdefault fit; --balance-interval the least time between its rounds, default 15s)", run: (*cli).createNamespace},
		{name: "namespaces balance", args: []string{"NAME"}, flags: balanceFlagSet, flagsHelp: "--balance off|seeds|fit [--balance-interval D]",
			help: "change a namespace's load-balancing policy after its creation (the policy starts afresh;\n" +
				"\t--balance-interval omitted takes the default, 15s)", run: (*cli).setBalance},
		{name: "namespaces delete", args: []string{"NAME"}, help: "delete a namespace", run: (*cli).deleteNamespace},
		{name: "ring", args: []string{"NS"}, help: "the ring NS is moving toward: each entry's position, owner and index", run: (*cli).ring},
		{name: "leases", args: []string{"NS"}, help: "the lease table: each arc's holder, generation, state and expiry", run: (*cli).leases},
		{name: "owners", args: []string{"NS"}, help: "the live owner sessions, their virtual nodes and last contact", run: (*cli).owners},
		{name: "top", args: []string{"NS"}, flags: topFlagSet, flagsHelp: "[--interval D] [--count N]",
			help: "each owner's reported load, share of the ring and virtual nodes, refreshed every --interval (default 2s)\n" +
				"\t--count times (default 0: until interrupted); -o json prints one JSON object per refresh", run: (*cli).top},
		{name: "drain", args: []string{"NS", "OWNER"}, help: "take OWNER out of the ring of NS; its arcs move to the others", run: (*cli).drain},
		{name: "ratelimits", args: []string{"NS"}, help: "the fleet-wide rate limits of NS (fuge-proxy enforces them)", run: (*cli).rateLimits},
		{name: "ratelimits set", args: []string{"NS", "NAME"}, flags: rateLimitFlagSet, flagsHelp: rateLimitFlagsHelp,
			help: "add or replace the limit NAME: each value of header H gets N requests per period D across the fleet\n" +
				"\t(defaults: period 1s, burst N, enforce, panic_share, 10000 keys)", run: (*cli).setRateLimit},
		{name: "ratelimits delete", args: []string{"NS", "NAME"}, help: "remove the limit NAME from NS", run: (*cli).deleteRateLimit},
		{name: envoyBootstrapName, help: envoyBootstrapHelp}, // run by runEnvoyBootstrap, with flags of its own
		{name: "certs init", args: []string{"DIR"}, flags: certsFlagSet, flagsHelp: "[--host H ...] [--owner NS/NAME ...]", local: true,
			help: "write a development CA and certificates into DIR: manager, proxy, admin (fugectl's) and the owners named;\n" +
				"\t--host adds a manager host name or IP address (localhost and 127.0.0.1 are always in); refuses to overwrite", run: (*cli).certsInit},
		{name: "certs issue", args: []string{"DIR"}, flags: certsFlagSet, local: true,
			flagsHelp: "(--owner NS/NAME | --proxy NAME | --admin NAME | --manager NAME [--host H ...])",
			help: "issue one certificate with the CA in DIR, into DIR (owner-NS-NAME, proxy, admin or manager .crt and .key;\n" +
				"\ta new one replaces the old, and running processes pick it up)", run: (*cli).certsIssue},
	}
}

// globals are the flags accepted anywhere on the line.
type globals struct {
	manager   string
	output    string
	timeout   time.Duration
	tokenFile string
	tls       fugetls.Options
}

// register adds the global flags to fs, but not --manager when a command
// has a --manager of its own (certs issue).
func (g *globals) register(fs *flag.FlagSet) {
	if fs.Lookup("manager") == nil {
		fs.StringVar(&g.manager, "manager", g.manager, "")
	}
	fs.StringVar(&g.output, "o", g.output, "")
	fs.StringVar(&g.output, "output", g.output, "")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "")
	registerTLS(fs, &g.tls)
}

// cmdFlags are the flags of single commands.
type cmdFlags struct {
	// namespaces create
	ringSize      int
	header        string
	leaseDuration string
	balance       string
	balanceEvery  string
	// top
	interval time.Duration
	count    int
	// certs init and issue
	hosts, owners                     listFlag
	proxyName, adminName, managerName string
	// ratelimits set (ratelimit.go)
	rateLimit rateLimitFlags
}

func createFlagSet(fs *flag.FlagSet, f *cmdFlags) {
	fs.IntVar(&f.ringSize, "ring-size", 0, "")
	fs.StringVar(&f.header, "header", "", "")
	fs.StringVar(&f.leaseDuration, "lease-duration", "", "")
	fs.StringVar(&f.balance, "balance", "", "")
	fs.StringVar(&f.balanceEvery, "balance-interval", "", "")
}

func balanceFlagSet(fs *flag.FlagSet, f *cmdFlags) {
	fs.StringVar(&f.balance, "balance", "", "")
	fs.StringVar(&f.balanceEvery, "balance-interval", "", "")
}

func topFlagSet(fs *flag.FlagSet, f *cmdFlags) {
	fs.DurationVar(&f.interval, "interval", 2*time.Second, "")
	fs.IntVar(&f.count, "count", 0, "")
}

// usageError is a mistake on the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// run executes one command line and returns the exit code. now is the
// clock that "12s ago" is relative to.
func run(ctx context.Context, args []string, getenv func(string) string, now func() time.Time, stdout, stderr io.Writer) int {
	if rest, ok := envoyBootstrapArgs(args); ok {
		return runEnvoyBootstrap(rest, getenv, stdout, stderr)
	}
	c, cmd, rest, err := parse(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return exitOK
	}
	var certErr certError
	if errors.As(err, &certErr) {
		fmt.Fprintf(stderr, "fugectl: %v\n", err)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "fugectl: %v\nRun 'fugectl --help' for usage.\n", err)
		return exitUsage
	}
	c.out, c.errOut, c.now = stdout, stderr, now
	if c.insecure && !cmd.local {
		fmt.Fprintln(stderr, insecureWarning)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := cmd.run(c, ctx, rest); err != nil {
		fmt.Fprintf(stderr, "fugectl: %v\n", err)
		if errors.As(err, new(usageError)) {
			return exitUsage // a command's own check of its flags
		}
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
	var err error
	if g.tls, err = tlsFromEnv(getenv); err != nil {
		return nil, command{}, nil, err
	}
	fs := newFlagSet("fugectl")
	g.register(fs)
	if err = fs.Parse(args); err != nil {
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
		var subs []string
		for _, c := range commands() {
			if w := strings.Fields(c.name); len(w) > 1 && w[0] == words[0] {
				subs = append(subs, w[1])
			}
		}
		if len(subs) > 0 && (len(words) == 1 || strings.HasPrefix(words[1], "-")) {
			return nil, command{}, nil, usagef("%s needs one of: %s", words[0], strings.Join(subs, ", "))
		}
		return nil, command{}, nil, usagef("unknown command %q", strings.Join(words[:min(2, len(words))], " "))
	}
	if cmd.run == nil { // envoy-bootstrap after "--": runEnvoyBootstrap did not see it
		return nil, command{}, nil, usagef("usage: fugectl %s [flags], with no \"--\" before it", cmd.name)
	}
	fs = newFlagSet("fugectl " + cmd.name)
	var cf cmdFlags
	if cmd.flags != nil {
		cmd.flags(fs, &cf)
	}
	g.register(fs)
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
	c := &cli{json: g.output == "json", timeout: g.timeout, flags: cf, insecure: g.tls.Insecure}
	if cmd.local {
		return c, cmd, pos, nil
	}
	src, err := loadTLS(g.tls, fugetls.AdminBase, "an admin certificate")
	if err != nil {
		return nil, command{}, nil, err
	}
	var conf *tls.Config
	if src != nil {
		conf = src.ClientConfig(fugetls.RoleManager)
	}
	if c.client, err = admin.New(strings.Split(g.manager, ","), conf); errors.Is(err, admin.ErrScheme) {
		return nil, command{}, nil, usagef("--manager: %v (plain http:// needs --insecure, and https:// goes without it)", err)
	} else if err != nil {
		return nil, command{}, nil, usagef("--manager: %v", err)
	}
	if g.tokenFile != "" {
		tok, err := readToken(g.tokenFile)
		if err != nil {
			return nil, command{}, nil, usagef("--token-file: %v", err)
		}
		c.client.SetToken(tok)
	}
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
HTTP API, over mutual TLS with an admin certificate (--tls-dir), and makes
the certificates (certs init, certs issue).

Commands:
`)
	for _, c := range commands() {
		line := strings.Join(append([]string{c.name}, c.args...), " ")
		if c.flagsHelp != "" {
			line += " " + c.flagsHelp
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
  --tls-dir DIR
	certificates as certs init writes them: fugectl presents admin.crt
	(admin.key) and accepts a manager whose certificate ca.crt issued
	(default %s; env %s)
  --tls-ca, --tls-cert, --tls-key FILE
	the CA bundle, certificate and key instead of --tls-dir, all three
	(env %s, %s, %s)
  --insecure
	plain http and no certificate, for a manager run with --insecure
	(tests only; env %s=true)

Flags of namespaces create:
  --ring-size N       ring size R, a power of two (default the manager's: 4096)
  --header H          routing header (default the manager's: X-Fuge-Key)
  --lease-duration D  owner lease T (default the manager's --lease-duration)

Flags of certs init and certs issue:
  --host H            a manager's DNS name or IP address, for clients that
                      check host names (proxyless gRPC's xDS "tls"
                      credentials); repeatable
  --owner NS/NAME     an owner of namespace NS named NAME; repeatable in init
  --proxy NAME, --admin NAME, --manager NAME
                      the one identity certs issue writes

Exit status: 0 on success, 1 when a manager refuses or none answers, 2 for a
bad command line or missing certificates.
`, defaultManager, managerEnv, tokenFileEnv, fugetls.DefaultDir, tlsDirEnv, tlsCAEnv, tlsCertEnv, tlsKeyEnv, insecureEnv)
}
