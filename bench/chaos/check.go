package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The history a run records and its checkers. Times are CLOCK_MONOTONIC
// nanoseconds, shared by every process on the machine, so an owner's log
// and the harness's records compare directly.

// Serve is one request an owner answered, from its --history log: At is
// read inside the guard, where the owner believed it held the key.
type Serve struct {
	At     int64
	Owner  string // the process: name#incarnation
	Key    string
	Gen    uint64
	Status int
}

// Result is how a client call ended.
type Result int

const (
	OK      Result = iota // answered by an owner: written, read, or 404
	Failed                // a definite error: not executed (or, for a read, no effect)
	Unknown               // may or may not have been executed (timeout, 502, reset)
	Invalid               // an answer the protocol does not allow (accounting violation)
)

// Op is one client call through a proxy.
type Op struct {
	Client       int
	Key          string
	Put          bool
	Value        string // written, or read (empty: 404)
	Call, Return int64
	Result       Result
	Found        bool   // a read found the key
	Gen          uint64 // the generation the owner answered under (OK)
	Owner        string // the owner's name (OK)
	Why          string // for Failed, Unknown and Invalid
	Direct       bool   // sent straight to an owner, not through a proxy
}

// Loss is one loss notification the harness's lookup received: for each
// tracked key in the ranges, the generation its table then held (All: the
// staleness bound expired and everything counts as lost).
type Loss struct {
	At   int64
	All  bool
	Gens map[string]uint64
}

// Table is one table the harness's lookup published: each tracked key's
// generation.
type Table struct {
	At   int64
	Gens map[string]uint64
}

// History is everything a run recorded.
type History struct {
	Serves []Serve
	Ops    []Op
	Tables []Table
	Losses []Loss
	// Bound is the notification bound B the lookups are held to.
	Bound time.Duration
}

// Violation is one failed check, with enough to find it in the logs.
type Violation struct {
	Checker string
	What    string
}

func (v Violation) String() string { return v.Checker + ": " + v.What }

// Checkers lists every checker in report order.
var Checkers = []string{"exclusivity", "fencing", "linearizability", "notification", "accounting"}

// Check runs every checker.
func Check(h *History) []Violation {
	var out []Violation
	out = append(out, CheckExclusivity(h.Serves)...)
	out = append(out, CheckFencing(h.Serves, h.Tables)...)
	out = append(out, CheckLinearizable(h.Ops)...)
	out = append(out, CheckNotification(h.Serves, h.Tables, h.Losses, h.Bound)...)
	out = append(out, CheckAccounting(h.Ops)...)
	return out
}

// CheckExclusivity: per key, no generation is served by two processes, and
// the belief intervals of different (process, generation) pairs, each from
// its first to its last served request, never overlap. A generation is
// continuous by construction (the guard serves state under a generation
// only while held since), so an owner that served at t1 and t2 believed it
// held the key throughout.
func CheckExclusivity(serves []Serve) []Violation {
	type holder struct {
		owner string
		gen   uint64
	}
	type span struct {
		holder
		from, to int64
	}
	byKey := map[string]map[holder]*span{}
	genOwner := map[string]map[uint64]string{}
	var out []Violation
	for _, s := range serves {
		if byKey[s.Key] == nil {
			byKey[s.Key], genOwner[s.Key] = map[holder]*span{}, map[uint64]string{}
		}
		if o, ok := genOwner[s.Key][s.Gen]; ok && o != s.Owner {
			out = append(out, Violation{"exclusivity", fmt.Sprintf("key %s: generation %d served by %s and %s", s.Key, s.Gen, o, s.Owner)})
			continue
		}
		genOwner[s.Key][s.Gen] = s.Owner
		h := holder{s.Owner, s.Gen}
		if sp := byKey[s.Key][h]; sp == nil {
			byKey[s.Key][h] = &span{h, s.At, s.At}
		} else {
			sp.from, sp.to = min(sp.from, s.At), max(sp.to, s.At)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var spans []*span
		for _, sp := range byKey[k] {
			spans = append(spans, sp)
		}
		sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
		for i := 1; i < len(spans); i++ {
			a, b := spans[i-1], spans[i]
			if b.from <= a.to {
				out = append(out, Violation{"exclusivity", fmt.Sprintf("key %s: %s (gen %d) believed it held the key until %s while %s (gen %d) served it from %s",
					k, a.owner, a.gen, mono(a.to), b.owner, b.gen, mono(b.from))})
			}
			if b.to > a.to {
				continue
			}
			spans[i] = a // keep the longest-reaching span for the next comparison
		}
	}
	return out
}

// CheckFencing: every served request ran under the generation that was live
// for its key. Once the harness's lookup has seen a newer generation for a
// key, the manager had granted it, so the older lease had expired by every
// party's clock; an owner serving the older generation after that served
// under a dead generation.
func CheckFencing(serves []Serve, tables []Table) []Violation {
	// first[k][g] = when the lookup first showed generation g (or newer).
	type seen struct {
		at  int64
		gen uint64
	}
	first := map[string][]seen{}
	for _, t := range tables {
		for k, g := range t.Gens {
			s := first[k]
			if len(s) == 0 || g > s[len(s)-1].gen {
				first[k] = append(s, seen{t.At, g})
			}
		}
	}
	var out []Violation
	for _, s := range serves {
		for _, n := range first[s.Key] {
			if n.gen > s.Gen && n.at < s.At {
				out = append(out, Violation{"fencing", fmt.Sprintf("key %s: %s served generation %d at %s, after generation %d was published at %s",
					s.Key, s.Owner, s.Gen, mono(s.At), n.gen, mono(n.at))})
				break
			}
		}
	}
	return out
}

// CheckNotification: every change of a key's generation that an owner
// served reached the harness's lookup as a loss notification (or an "all
// lost") within bound of the new generation's first served request. The
// first generation the lookup saw for a key is its initial table, not a
// loss.
func CheckNotification(serves []Serve, tables []Table, losses []Loss, bound time.Duration) []Violation {
	initial := map[string]uint64{}
	for _, t := range tables {
		for k, g := range t.Gens {
			if _, ok := initial[k]; !ok {
				initial[k] = g
			}
		}
	}
	firstServe := map[string]map[uint64]int64{}
	for _, s := range serves {
		if s.Gen <= initial[s.Key] {
			continue
		}
		if firstServe[s.Key] == nil {
			firstServe[s.Key] = map[uint64]int64{}
		}
		if at, ok := firstServe[s.Key][s.Gen]; !ok || s.At < at {
			firstServe[s.Key][s.Gen] = s.At
		}
	}
	var out []Violation
	keys := make([]string, 0, len(firstServe))
	for k := range firstServe {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		gens := make([]uint64, 0, len(firstServe[k]))
		for g := range firstServe[k] {
			gens = append(gens, g)
		}
		slices.Sort(gens)
		for _, g := range gens {
			at := firstServe[k][g]
			ok := false
			for _, l := range losses {
				if l.At > at+int64(bound) {
					break
				}
				if l.All || l.Gens[k] >= g {
					ok = true
					break
				}
			}
			if !ok {
				out = append(out, Violation{"notification", fmt.Sprintf("key %s: generation %d first served at %s, no loss notification within %v",
					k, g, mono(at), bound)})
			}
		}
	}
	return out
}

// CheckAccounting: every call ended ok, with a definite error, or unknown.
func CheckAccounting(ops []Op) []Violation {
	var out []Violation
	for _, o := range ops {
		if o.Result == Invalid {
			out = append(out, Violation{"accounting", fmt.Sprintf("client %d key %s at %s: %s", o.Client, o.Key, mono(o.Call), o.Why)})
		}
	}
	return out
}

// The presence service as porcupine sees one device: a register whose
// state belongs to one generation. A write under generation g sets it; a
// read under the state's generation returns it; a read under a newer
// generation finds nothing (the state was lost with the lease, and the
// loss was announced); a read or write under an older generation than one
// already used is a second copy.
type regState struct {
	val string
	gen uint64
	any bool // an unknown write may have set val under any newer generation
}

type regInput struct {
	put bool
	val string
}

type regOutput struct {
	unknown bool
	found   bool
	val     string
	gen     uint64
}

var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(st, in, out any) (bool, any) {
		s, i, o := st.(regState), in.(regInput), out.(regOutput)
		if i.put {
			if o.unknown {
				return true, regState{val: i.val, gen: s.gen, any: true}
			}
			if o.gen < s.gen && !s.any {
				return false, s
			}
			return true, regState{val: i.val, gen: o.gen}
		}
		switch {
		case o.unknown:
			return true, s
		case o.found:
			if s.val != o.val || (o.gen != s.gen && !s.any) {
				return false, s
			}
			return true, regState{val: o.val, gen: o.gen}
		default: // 404
			if o.gen < s.gen && !s.any {
				return false, s
			}
			if o.gen == s.gen && s.val != "" && !s.any {
				return false, s
			}
			return true, regState{gen: max(o.gen, s.gen)}
		}
	},
	Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
}

// linTimeout bounds porcupine per key; a key it cannot decide in time is
// reported as a violation rather than passed.
const linTimeout = 60 * time.Second

// CheckLinearizable checks each key's history with porcupine. Failed calls
// had no effect and are left out; unknown ones may have taken effect at any
// time after their call.
func CheckLinearizable(ops []Op) []Violation {
	byKey := map[string][]porcupine.Operation{}
	var last int64
	for _, o := range ops {
		last = max(last, o.Return)
	}
	for n, o := range ops {
		var out regOutput
		ret := o.Return
		switch o.Result {
		case Failed, Invalid:
			continue
		case Unknown:
			out.unknown = true
			ret = last + 1 + int64(n) // never returned
		case OK:
			out = regOutput{found: o.Found, val: o.Value, gen: o.Gen}
			if !o.Put {
				out.val = o.Value
			}
		}
		in := regInput{put: o.Put, val: o.Value}
		if !o.Put {
			in.val = ""
		}
		byKey[o.Key] = append(byKey[o.Key], porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call, Output: out, Return: ret})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Violation
	for _, k := range keys {
		switch porcupine.CheckOperationsTimeout(registerModel, byKey[k], linTimeout) {
		case porcupine.Ok:
		case porcupine.Illegal:
			out = append(out, Violation{"linearizability", fmt.Sprintf("key %s: %d operations are not linearizable", k, len(byKey[k]))})
		default:
			out = append(out, Violation{"linearizability", fmt.Sprintf("key %s: undecided within %v", k, linTimeout)})
		}
	}
	return out
}

// SlowCall is how long a call may wait before its key counts as
// unavailable: the proxy retries within its budget, so an outage shows as
// slow answers before it shows as failures.
const SlowCall = 100 * time.Millisecond

// Unavailability returns the length of every gap in which a key was not
// served promptly: from the start of a call that failed or waited more
// than SlowCall to the end of the next call on the key that succeeded (or
// the end of the run). A slow call that succeeded is its own gap. Calls
// sent straight to an owner are left out.
func Unavailability(ops []Op) []time.Duration {
	byKey := map[string][]Op{}
	var end int64
	for _, o := range ops {
		end = max(end, o.Return)
		if o.Direct {
			continue // a stale router's 421 says nothing of the pool's availability
		}
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	var gaps []time.Duration
	for _, os := range byKey {
		sort.Slice(os, func(i, j int) bool { return os[i].Call < os[j].Call })
		start := int64(-1)
		for _, o := range os {
			slow := time.Duration(o.Return-o.Call) > SlowCall
			switch {
			case o.Result == OK && start >= 0:
				gaps = append(gaps, time.Duration(o.Return-start))
				start = -1
			case o.Result == OK && slow:
				gaps = append(gaps, time.Duration(o.Return-o.Call))
			case o.Result != OK && start < 0:
				start = o.Call
			}
		}
		if start >= 0 {
			gaps = append(gaps, time.Duration(end-start))
		}
	}
	slices.Sort(gaps)
	return gaps
}

// quantile returns the q-quantile of sorted ds (0 if empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// mono formats a CLOCK_MONOTONIC time for messages.
func mono(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
