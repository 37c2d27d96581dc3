package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fuge-project/fuge/cmd/internal/admin"
)

// cli runs commands against the managers and prints for a person (tables)
// or a program (-o json).
type cli struct {
	client   *admin.Client // nil for the commands that talk to no manager
	json     bool
	timeout  time.Duration
	flags    cmdFlags
	insecure bool
	out      io.Writer
	errOut   io.Writer        // warnings
	now      func() time.Time // for "12s ago", and certificates' validity
}

// get fetches path into v, and with -o json prints the answer as sent
// (indented) and reports printed.
func (c *cli) get(ctx context.Context, path string, v any) (printed bool, err error) {
	raw, err := c.client.Call(ctx, http.MethodGet, path, nil, v)
	if err != nil || !c.json {
		return false, err
	}
	return true, c.printJSON(raw)
}

func (c *cli) printJSON(raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return fmt.Errorf("bad answer from the manager: %w", err)
	}
	b.WriteByte('\n')
	_, err := c.out.Write(b.Bytes())
	return err
}

func (c *cli) cluster(ctx context.Context, _ []string) error {
	var cl admin.Cluster
	if printed, err := c.get(ctx, admin.ClusterPath, &cl); printed || err != nil {
		return err
	}
	t := c.table()
	t.kv("node", cl.NodeID)
	t.kv("role", cl.Role)
	t.kv("leader", cl.LeaderID)
	t.kv("leader grpc", cl.LeaderGRPC)
	t.kv("leader http", cl.LeaderHTTP)
	t.kv("term", strconv.FormatUint(cl.Term, 10))
	t.kv("last index", strconv.FormatUint(cl.LastIndex, 10))
	t.kv("commit index", strconv.FormatUint(cl.CommitIndex, 10))
	t.kv("xds streams", strconv.Itoa(cl.LookupStreams))
	if cl.Role == "leader" {
		in := "none: the leader serves Lookups"
		if len(cl.StandbysInContact) > 0 {
			in = strings.Join(cl.StandbysInContact, ", ") + ": Lookups go there"
		}
		t.kv("standbys in contact", in)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.out)
	t = c.table("ID", "ADDRESS", "SUFFRAGE", "LEADER")
	for _, s := range cl.Servers {
		t.row(s.ID, s.Address, s.Suffrage, yesNo(s.ID != "" && s.ID == cl.LeaderID))
	}
	return t.flush()
}

// nsStatus is one namespace's line of status; -o json prints it.
type nsStatus struct {
	admin.Namespace
	Owners int            `json:"owners"`
	Arcs   map[string]int `json:"arcs"` // count per state
}

func (c *cli) status(ctx context.Context, _ []string) error {
	rawCluster, err := c.client.Call(ctx, http.MethodGet, admin.ClusterPath, nil, nil)
	if err != nil {
		return err
	}
	var cl admin.Cluster
	if err := json.Unmarshal(rawCluster, &cl); err != nil {
		return fmt.Errorf("bad answer from the manager: %w", err)
	}
	// A person sees the cluster even when the namespaces fail (no leader).
	if !c.json {
		t := c.table("NODE", "ROLE", "LEADER", "TERM", "LAST INDEX", "COMMIT INDEX")
		t.row(cl.NodeID, cl.Role, cl.LeaderID, strconv.FormatUint(cl.Term, 10),
			strconv.FormatUint(cl.LastIndex, 10), strconv.FormatUint(cl.CommitIndex, 10))
		if err := t.flush(); err != nil {
			return err
		}
		if cl.LeaderHTTP != "" {
			scheme := "https"
			if c.insecure {
				scheme = "http"
			}
			fmt.Fprintf(c.out, "dashboard: %s://%s/ui/\n", scheme, cl.LeaderHTTP)
		}
		fmt.Fprintln(c.out)
	}
	var list admin.NamespaceList
	if _, err := c.client.Call(ctx, http.MethodGet, admin.NamespacesPath, nil, &list); err != nil {
		return err
	}
	arcStates := []string{"granted", "recalling", "free"}
	out := make([]nsStatus, 0, len(list.Namespaces))
	other := false // some arc is in a state this fugectl does not know
	for _, ns := range list.Namespaces {
		var owners admin.Owners
		if _, err := c.client.Call(ctx, http.MethodGet, admin.NamespacePath(ns.Name, "owners"), nil, &owners); err != nil {
			return fmt.Errorf("namespace %s: %w", ns.Name, err)
		}
		var leases admin.Leases
		if _, err := c.client.Call(ctx, http.MethodGet, admin.NamespacePath(ns.Name, "leases"), nil, &leases); err != nil {
			return fmt.Errorf("namespace %s: %w", ns.Name, err)
		}
		st := nsStatus{Namespace: ns, Owners: len(owners.Owners), Arcs: map[string]int{}}
		for _, s := range arcStates {
			st.Arcs[s] = 0
		}
		for _, a := range leases.Arcs {
			st.Arcs[a.State]++
			other = other || !slices.Contains(arcStates, a.State)
		}
		out = append(out, st)
	}

	if c.json {
		b, err := json.Marshal(struct {
			Cluster    json.RawMessage `json:"cluster"`
			Namespaces []nsStatus      `json:"namespaces"`
		}{rawCluster, out})
		if err != nil {
			return err
		}
		return c.printJSON(b)
	}
	header := []string{"NAMESPACE", "RING SIZE", "LEASE", "OWNERS", "GRANTED", "RECALLING", "FREE"}
	if other {
		header = append(header, "OTHER")
	}
	t := c.table(header...)
	for _, st := range out {
		row := []string{st.Name, strconv.Itoa(st.RingSize), st.LeaseDuration, strconv.Itoa(st.Owners)}
		known := 0
		for _, s := range arcStates {
			row = append(row, strconv.Itoa(st.Arcs[s]))
			known += st.Arcs[s]
		}
		if other {
			total := 0
			for _, n := range st.Arcs {
				total += n
			}
			row = append(row, strconv.Itoa(total-known))
		}
		t.row(row...)
	}
	return t.flush()
}

func (c *cli) namespaces(ctx context.Context, _ []string) error {
	var list admin.NamespaceList
	if printed, err := c.get(ctx, admin.NamespacesPath, &list); printed || err != nil {
		return err
	}
	return c.namespaceTable(list.Namespaces...)
}

func (c *cli) namespaceTable(nss ...admin.Namespace) error {
	t := c.table("NAME", "RING SIZE", "HEADER", "LEASE", "BALANCE")
	for _, ns := range nss {
		t.row(ns.Name, strconv.Itoa(ns.RingSize), ns.Header, ns.LeaseDuration, ns.Balance)
	}
	return t.flush()
}

// grpcRingHashCap is grpc-go's default cap on ring_hash ring sizes
// (GRPC_RING_HASH_CAP).
const grpcRingHashCap = 4096

func (c *cli) createNamespace(ctx context.Context, args []string) error {
	switch c.flags.balance {
	case "", "off", "seeds", "fit":
	default:
		return usagef("--balance %q: want off, seeds or fit", c.flags.balance)
	}
	in := admin.Namespace{Name: args[0], RingSize: c.flags.ringSize, Header: c.flags.header, LeaseDuration: c.flags.leaseDuration,
		Balance: c.flags.balance, BalanceInterval: c.flags.balanceEvery}
	var ns admin.Namespace
	raw, err := c.client.Call(ctx, http.MethodPost, admin.NamespacesPath, in, &ns)
	if err != nil {
		return err
	}
	if ns.RingSize > grpcRingHashCap {
		fmt.Fprintf(c.errOut, "fugectl: warning: ring size %d is above grpc-go's default cap on ring_hash rings (%d):\n"+
			"  proxyless gRPC clients need GRPC_RING_HASH_CAP=%d (or more) in their environment, read at start,\n"+
			"  or they build a smaller ring and send about half of the keys to the wrong server first\n"+
			"  (examples/grpc sets it; Envoy and fuge-proxy need nothing)\n", ns.RingSize, grpcRingHashCap, ns.RingSize)
	}
	if c.json {
		return c.printJSON(raw)
	}
	return c.namespaceTable(ns)
}

// setBalance is namespaces balance: PUT /v1/namespaces/NAME/balance.
func (c *cli) setBalance(ctx context.Context, args []string) error {
	switch c.flags.balance {
	case "off", "seeds", "fit":
	default:
		return usagef("--balance %q: want off, seeds or fit", c.flags.balance)
	}
	in := struct {
		Balance         string `json:"balance"`
		BalanceInterval string `json:"balance_interval,omitempty"`
	}{c.flags.balance, c.flags.balanceEvery}
	var ns admin.Namespace
	raw, err := c.client.Call(ctx, http.MethodPut, admin.NamespacePath(args[0], "balance"), in, &ns)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(raw)
	}
	return c.namespaceTable(ns)
}

func (c *cli) deleteNamespace(ctx context.Context, args []string) error {
	if _, err := c.client.Call(ctx, http.MethodDelete, admin.NamespacePath(args[0]), nil, nil); err != nil {
		return err
	}
	if !c.json { // the API answers 204 with no body: nothing to pass through
		fmt.Fprintf(c.out, "namespace %s deleted\n", args[0])
	}
	return nil
}

func (c *cli) ring(ctx context.Context, args []string) error {
	var r admin.Ring
	if printed, err := c.get(ctx, admin.NamespacePath(args[0], "ring"), &r); printed || err != nil {
		return err
	}
	t := c.table("POSITION", "OWNER", "INDEX")
	for _, e := range r.Entries {
		t.row(e.Position, e.Owner, strconv.Itoa(e.Index))
	}
	return t.flush()
}

func (c *cli) leases(ctx context.Context, args []string) error {
	var l admin.Leases
	if printed, err := c.get(ctx, admin.NamespacePath(args[0], "leases"), &l); printed || err != nil {
		return err
	}
	t := c.table("START", "END", "OWNER", "GENERATION", "STATE", "EXPIRES")
	for _, a := range l.Arcs {
		t.row(a.Start, a.End, a.Owner, strconv.FormatUint(a.Generation, 10), a.State, c.relative(a.ExpiresAt))
	}
	return t.flush()
}

func (c *cli) owners(ctx context.Context, args []string) error {
	var o admin.Owners
	if printed, err := c.get(ctx, admin.NamespacePath(args[0], "owners"), &o); printed || err != nil {
		return err
	}
	t := c.table("NAME", "ADDRESS", "VNODES", "DRAINING", "LAST HEARD")
	for _, ow := range o.Owners {
		t.row(ow.Name, ow.Addr, strconv.Itoa(ow.VNodes), yesNo(ow.Draining), c.relative(ow.LastHeard))
	}
	return t.flush()
}

func (c *cli) drain(ctx context.Context, args []string) error {
	var d admin.Drain
	raw, err := c.client.Call(ctx, http.MethodPost, admin.NamespacePath(args[0], "owners", args[1], "drain"), nil, &d)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(raw)
	}
	fmt.Fprintf(c.out, "owner %s of namespace %s is draining; its arcs move to the other owners\n", args[1], args[0])
	return nil
}

// relative renders an RFC 3339 time as "12s ago" or "in 48s", rounded to
// the second; empty is "-", and what does not parse is shown as sent.
func (c *cli) relative(s string) string {
	if s == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	d := t.Sub(c.now()).Round(time.Second)
	switch {
	case d > 0:
		return "in " + d.String()
	case d < 0:
		return (-d).String() + " ago"
	}
	return "now"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// table prints aligned columns; empty cells show as "-".
type table struct{ tw *tabwriter.Writer }

func (c *cli) table(header ...string) table {
	t := table{tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t table) row(cells ...string) {
	for i, s := range cells {
		if s == "" {
			s = "-"
		}
		if i > 0 {
			io.WriteString(t.tw, "\t")
		}
		io.WriteString(t.tw, s)
	}
	io.WriteString(t.tw, "\n")
}

// kv prints a "key  value" line of a property list.
func (t table) kv(key, value string) { t.row(key, value) }

func (t table) flush() error { return t.tw.Flush() }
