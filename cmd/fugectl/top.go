package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fuge-project/fuge/cmd/internal/admin"
)

// top prints each owner's reported load, its share of the load, of the
// ring and its virtual nodes, and refreshes every --interval, --count
// times (0: until the context ends).
func (c *cli) top(ctx context.Context, args []string) error {
	if c.flags.interval <= 0 {
		return usagef("--interval %v must be positive", c.flags.interval)
	}
	if c.flags.count < 0 {
		return usagef("--count %d must not be negative", c.flags.count)
	}
	// The command's timeout bounds each refresh, not the whole run.
	base := context.WithoutCancel(ctx)
	for i := 0; c.flags.count == 0 || i < c.flags.count; i++ {
		if i > 0 {
			select {
			case <-time.After(c.flags.interval):
			case <-ctx.Done():
				if c.flags.count == 0 {
					return nil
				}
			}
		}
		rctx, cancel := context.WithTimeout(base, c.timeout)
		err := c.topOnce(rctx, args[0])
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *cli) topOnce(ctx context.Context, ns string) error {
	var o admin.Owners
	raw, err := c.client.Call(ctx, "GET", admin.NamespacePath(ns, "owners"), nil, &o)
	if err != nil {
		return err
	}
	if c.json {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(c.out, "%s\n", b)
		return nil
	}
	var total, maxLoad float64
	live := 0
	for _, ow := range o.Owners {
		if !ow.Draining {
			total += ow.Load
			maxLoad = max(maxLoad, ow.Load)
			live++
		}
	}
	ratio := "-"
	if live > 0 && total > 0 {
		ratio = strconv.FormatFloat(maxLoad/(total/float64(live)), 'f', 2, 64)
	}
	fmt.Fprintf(c.out, "%s  namespace %s  policy %s  max/mean %s  rounds %d (%d moved %d vnodes, %d ranges)\n",
		c.now().UTC().Format(time.TimeOnly), ns, o.Balance.Policy, ratio, o.Balance.Rounds, o.Balance.MovingRounds,
		o.Balance.VNodesMoved, o.Balance.RangesMoved)
	t := c.table("OWNER", "LOAD", "LOAD %", "RING %", "VNODES", "REPORTED", "DRAINING")
	for _, ow := range o.Owners {
		share := "-"
		if total > 0 && !ow.Draining {
			share = strconv.FormatFloat(100*ow.Load/total, 'f', 1, 64)
		}
		load := "-"
		if ow.LoadReported != "" {
			load = strconv.FormatFloat(ow.Load, 'f', 1, 64)
		}
		t.row(ow.Name, load, share, strconv.FormatFloat(100*ow.RingShare, 'f', 1, 64), strconv.Itoa(ow.VNodes),
			c.relative(ow.LoadReported), yesNo(ow.Draining))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.out)
	return nil
}
