package manager

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ratelimit"
)

// A namespace's named rate limits, replicated through raft beside its
// config and pushed to its registered proxies.

// maxRateLimits bounds the limits of one namespace, maxRoutePrefix a
// limit's route prefix.
const (
	maxRateLimits  = 64
	maxRoutePrefix = 256
)

// The raft ops of this file.
const (
	opRateLimits = "ratelimits"
	opProxyView  = "proxyview"
)

// RateLimitRule is one named limit: the requests it matches (a route
// prefix) and keys (a header's value), and the token bucket every key
// value gets across the fleet.
type RateLimitRule struct {
	Name string `json:"name"`
	// RoutePrefix selects requests whose path starts with it ("" or "/":
	// every request).
	RoutePrefix string `json:"route_prefix"`
	// Header's value is the key; a request without it is not limited.
	Header    string             `json:"header"`
	Requests  float64            `json:"requests"`
	Period    jsonDuration       `json:"period"`
	Burst     float64            `json:"burst,omitempty"`
	Overrides map[string]float64 `json:"overrides,omitempty"`
	Mode      string             `json:"mode,omitempty"`       // enforce (default) | shadow
	OnNoView  string             `json:"on_no_view,omitempty"` // panic_share (default) | fail_open | fail_closed
	MaxKeys   int                `json:"max_keys,omitempty"`
}

// Limit is the rule's token bucket, defaults filled in.
func (r RateLimitRule) Limit() ratelimit.Limit {
	return ratelimit.Limit{
		Name: r.Name, Requests: r.Requests, Period: time.Duration(r.Period), Burst: r.Burst,
		Overrides: r.Overrides, Mode: ratelimit.Mode(r.Mode), OnNoView: ratelimit.NoView(r.OnNoView), MaxKeys: r.MaxKeys,
	}.WithDefaults()
}

// RateLimitSet is a namespace's limits; Version is the raft index that
// last set them.
type RateLimitSet struct {
	Version uint64          `json:"version"`
	Limits  []RateLimitRule `json:"limits"`
}

// ValidateRateLimits checks a namespace's limits and fills in their
// defaults; the error names the field (limits[i].field).
func ValidateRateLimits(rules []RateLimitRule) ([]RateLimitRule, error) {
	if len(rules) > maxRateLimits {
		return nil, fmt.Errorf("%w: limits: %d, at most %d", ErrBadRequest, len(rules), maxRateLimits)
	}
	out := make([]RateLimitRule, 0, len(rules))
	seen := map[string]bool{}
	for i, r := range rules {
		bad := func(field string, err error) error {
			return fmt.Errorf("%w: limits[%d].%s: %w", ErrBadRequest, i, field, err)
		}
		if seen[r.Name] {
			return nil, bad("name", fmt.Errorf("%q twice", r.Name))
		}
		seen[r.Name] = true
		if len(r.RoutePrefix) > maxRoutePrefix || r.RoutePrefix != "" && !strings.HasPrefix(r.RoutePrefix, "/") {
			return nil, bad("route_prefix", fmt.Errorf("%q must start with / and be at most %d bytes", r.RoutePrefix, maxRoutePrefix))
		}
		for j := 0; j < len(r.RoutePrefix); j++ {
			if c := r.RoutePrefix[j]; c <= ' ' || c >= 0x7f {
				return nil, bad("route_prefix", fmt.Errorf("byte %d of %q is not printable ASCII", j, r.RoutePrefix))
			}
		}
		if err := lease.ValidHeaderName("header", r.Header); err != nil {
			return nil, bad("header", err)
		}
		l := r.Limit()
		if err := l.Validate(); err != nil {
			return nil, bad("limit", err)
		}
		r.Period, r.Burst, r.Mode, r.OnNoView, r.MaxKeys = jsonDuration(l.Period), l.Burst, string(l.Mode), string(l.OnNoView), l.MaxKeys
		r.Overrides = maps.Clone(r.Overrides)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b RateLimitRule) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// applyProxy applies the ops of this file; index is the entry's raft
// index. The caller holds f.mu.
func (f *fsm) applyProxy(c command, index uint64) any {
	switch c.Op {
	case opRateLimits:
		if c.RateLimits == nil {
			return fmt.Errorf("%w: ratelimits without limits", ErrBadRequest)
		}
		if _, ok := f.st.Namespaces[c.Name]; !ok {
			return fmt.Errorf("%w: %q", ErrUnknownNamespace, c.Name)
		}
		if f.st.RateLimits == nil {
			f.st.RateLimits = map[string]RateLimitSet{}
		}
		set := *c.RateLimits
		set.Version = index
		f.st.RateLimits[c.Name] = set
	case opProxyView:
		if c.ProxyView == nil {
			return fmt.Errorf("%w: proxyview without a view", ErrBadRequest)
		}
		if _, ok := f.st.Namespaces[c.ProxyView.Namespace]; !ok {
			return fmt.Errorf("%w: %q", ErrUnknownNamespace, c.ProxyView.Namespace)
		}
		if f.st.ProxyViews == nil {
			f.st.ProxyViews = map[string]ProxyView{}
		}
		v := *c.ProxyView
		v.ID = index
		f.st.ProxyViews[v.Namespace] = v
	default:
		return fmt.Errorf("%w: unknown op %q", ErrBadRequest, c.Op)
	}
	return nil
}

// rateLimits returns a namespace's committed limits.
func (f *fsm) rateLimits(ns string) RateLimitSet {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.RateLimits[ns]
}

// proxyView returns a namespace's committed view.
func (f *fsm) proxyView(ns string) (ProxyView, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	v, ok := f.st.ProxyViews[ns]
	return v, ok
}

// getRateLimits serves GET /v1/namespaces/{ns}/ratelimits.
func (s *Server) getRateLimits(w http.ResponseWriter, r *http.Request, _ *leaderState) {
	ns := r.PathValue("ns")
	if !s.fsm.hasNamespace(ns) {
		writeErr(w, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns))
		return
	}
	set := s.fsm.rateLimits(ns)
	if set.Limits == nil {
		set.Limits = []RateLimitRule{}
	}
	writeJSON(w, http.StatusOK, set)
}

// putRateLimits serves PUT /v1/namespaces/{ns}/ratelimits: the body
// {"limits": [...]} replaces the namespace's limits. A refused body
// changes nothing.
func (s *Server) putRateLimits(w http.ResponseWriter, r *http.Request, _ *leaderState) {
	ns := r.PathValue("ns")
	var in struct {
		Limits []RateLimitRule `json:"limits"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeErr(w, err)
		return
	}
	rules, err := ValidateRateLimits(in.Limits)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !s.fsm.hasNamespace(ns) {
		writeErr(w, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns))
		return
	}
	if err := s.apply(command{Op: opRateLimits, Name: ns, RateLimits: &RateLimitSet{Limits: rules}}); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.fsm.rateLimits(ns))
}

// getProxies serves GET /v1/namespaces/{ns}/proxies: the committed view
// and the leader's registrations.
func (s *Server) getProxies(w http.ResponseWriter, r *http.Request, _ *leaderState) {
	ns := r.PathValue("ns")
	if !s.fsm.hasNamespace(ns) {
		writeErr(w, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns))
		return
	}
	v, _ := s.fsm.proxyView(ns)
	if v.Members == nil {
		v.Members = []ViewMember{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"view": v, "registrations": s.proxySvc().registrations(ns)})
}

// jsonDuration is a time.Duration written as a string ("1s", "30s").
type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("period: want a duration such as \"1s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("period: %w", err)
	}
	*d = jsonDuration(v)
	return nil
}
