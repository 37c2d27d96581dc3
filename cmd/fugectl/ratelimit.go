package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fuge-project/fuge/cmd/internal/admin"
)

// rateLimit is one named limit as the admin API reads and writes it
// (manager.RateLimitRule).
type rateLimit struct {
	Name        string             `json:"name"`
	RoutePrefix string             `json:"route_prefix"`
	Header      string             `json:"header"`
	Requests    float64            `json:"requests"`
	Period      string             `json:"period"`
	Burst       float64            `json:"burst,omitempty"`
	Overrides   map[string]float64 `json:"overrides,omitempty"`
	Mode        string             `json:"mode,omitempty"`
	OnNoView    string             `json:"on_no_view,omitempty"`
	MaxKeys     int                `json:"max_keys,omitempty"`
}

type rateLimitSet struct {
	Version uint64      `json:"version"`
	Limits  []rateLimit `json:"limits"`
}

// rateLimitFlags are ratelimits set's flags.
type rateLimitFlags struct {
	routePrefix, header, period, mode, onNoView string
	requests, burst                             float64
	maxKeys                                     int
	overrides                                   listFlag
}

const rateLimitFlagsHelp = "--header H --requests N [--period D] [--burst N] [--route-prefix P]\n" +
	"\t    [--override VALUE=N ...] [--mode enforce|shadow] [--on-no-view panic_share|fail_open|fail_closed] [--max-keys N]"

func rateLimitFlagSet(fs *flag.FlagSet, f *cmdFlags) {
	r := &f.rateLimit
	fs.StringVar(&r.routePrefix, "route-prefix", "", "")
	fs.StringVar(&r.header, "header", "", "")
	fs.Float64Var(&r.requests, "requests", 0, "")
	fs.StringVar(&r.period, "period", "1s", "")
	fs.Float64Var(&r.burst, "burst", 0, "")
	fs.Var(&r.overrides, "override", "")
	fs.StringVar(&r.mode, "mode", "", "")
	fs.StringVar(&r.onNoView, "on-no-view", "", "")
	fs.IntVar(&r.maxKeys, "max-keys", 0, "")
}

func (c *cli) rateLimits(ctx context.Context, args []string) error {
	var set rateLimitSet
	if printed, err := c.get(ctx, admin.NamespacePath(args[0], "ratelimits"), &set); printed || err != nil {
		return err
	}
	return c.rateLimitTable(set)
}

func (c *cli) rateLimitTable(set rateLimitSet) error {
	t := c.table("NAME", "ROUTE PREFIX", "HEADER", "LIMIT", "BURST", "OVERRIDES", "MODE", "NO VIEW", "MAX KEYS")
	for _, l := range set.Limits {
		var ov []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range l.Overrides {
				if !yield(k) {
					return
				}
			}
		}) {
			ov = append(ov, k+"="+strconv.FormatFloat(l.Overrides[k], 'g', -1, 64))
		}
		t.row(l.Name, l.RoutePrefix, l.Header, strconv.FormatFloat(l.Requests, 'g', -1, 64)+"/"+l.Period,
			strconv.FormatFloat(l.Burst, 'g', -1, 64), strings.Join(ov, ","), l.Mode, l.OnNoView, strconv.Itoa(l.MaxKeys))
	}
	return t.flush()
}

// setRateLimit adds the limit NAME to namespace NS, or replaces it.
func (c *cli) setRateLimit(ctx context.Context, args []string) error {
	f := c.flags.rateLimit
	if f.header == "" || f.requests <= 0 {
		return usagef("ratelimits set needs --header and a positive --requests")
	}
	if d, err := time.ParseDuration(f.period); err != nil || d <= 0 {
		return usagef("--period %q: want a positive duration such as 1s or 30s", f.period)
	}
	l := rateLimit{Name: args[1], RoutePrefix: f.routePrefix, Header: f.header, Requests: f.requests, Period: f.period,
		Burst: f.burst, Mode: f.mode, OnNoView: f.onNoView, MaxKeys: f.maxKeys}
	for _, o := range f.overrides {
		k, v, ok := strings.Cut(o, "=")
		n, err := strconv.ParseFloat(v, 64)
		if !ok || k == "" || err != nil {
			return usagef("--override %q: want VALUE=REQUESTS", o)
		}
		if l.Overrides == nil {
			l.Overrides = map[string]float64{}
		}
		l.Overrides[k] = n
	}
	return c.editRateLimits(ctx, args[0], func(ls []rateLimit) []rateLimit {
		ls = slices.DeleteFunc(ls, func(x rateLimit) bool { return x.Name == l.Name })
		return append(ls, l)
	})
}

// deleteRateLimit removes the limit NAME from namespace NS.
func (c *cli) deleteRateLimit(ctx context.Context, args []string) error {
	found := false
	err := c.editRateLimits(ctx, args[0], func(ls []rateLimit) []rateLimit {
		n := len(ls)
		ls = slices.DeleteFunc(ls, func(x rateLimit) bool { return x.Name == args[1] })
		found = len(ls) < n
		return ls
	})
	if err == nil && !found {
		return fmt.Errorf("namespace %s has no limit %q", args[0], args[1])
	}
	return err
}

// editRateLimits reads the namespace's limits, edits them and writes them
// back (the manager validates the whole set).
func (c *cli) editRateLimits(ctx context.Context, ns string, edit func([]rateLimit) []rateLimit) error {
	path := admin.NamespacePath(ns, "ratelimits")
	var set rateLimitSet
	if _, err := c.client.Call(ctx, http.MethodGet, path, nil, &set); err != nil {
		return err
	}
	body := struct {
		Limits []rateLimit `json:"limits"`
	}{edit(set.Limits)}
	if body.Limits == nil {
		body.Limits = []rateLimit{}
	}
	var out rateLimitSet
	raw, err := c.client.Call(ctx, http.MethodPut, path, body, &out)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(raw)
	}
	return c.rateLimitTable(out)
}
