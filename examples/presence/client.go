package presence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/ring"
)

// Defaults of ClientConfig.
const (
	DefaultHeader      = "X-Fuge-Key"
	DefaultTimeout     = 10 * time.Second
	DefaultAttempts    = 4
	DefaultBackoffBase = 50 * time.Millisecond
	DefaultBackoffMax  = time.Second
	DefaultConcurrency = 8
)

// Errors of the Client. Errors from a response wrap one of them, or name
// the status when none fits.
var (
	ErrNoBaseURL   = errors.New("presence: base URL is empty")
	ErrBadID       = errors.New("presence: device id must be 1 to 256 printable ASCII characters")
	ErrNotFound    = errors.New("presence: device not found")
	ErrUnavailable = errors.New("presence: service unavailable")
)

// ClientConfig configures a Client. Zero values mean the defaults.
type ClientConfig struct {
	// BaseURL is where requests go: fuge-proxy (or Envoy) in front of the
	// pool, e.g. "http://127.0.0.1:8080". Required.
	BaseURL string
	// Header is the routing header that carries the device id. Zero means
	// X-Fuge-Key.
	Header string
	// HTTPClient sends the requests. Nil means a client with a
	// DefaultTimeout (10 s) timeout per attempt.
	HTTPClient *http.Client
	// Attempts bounds the tries of one operation: a 503 (the pool had no
	// owner for the key within the proxy's retry budget, or the owner lost
	// its lease during the request) or a failed connection to the proxy is
	// retried after a backoff (from DefaultBackoffBase, doubling, at most
	// DefaultBackoffMax, or the response's Retry-After if longer, capped
	// the same). Both operations are idempotent. Zero means 4.
	Attempts int
	// Concurrency bounds the PUTs in flight during a Republish. Zero
	// means 8.
	Concurrency int
	// OnWrite, if set, hears every acknowledged PUT, Publish's and
	// Republish's alike, while the client still holds the device's lock:
	// calls for one device come in the order the writes took effect.
	// It must not call back into the Client for the same device.
	OnWrite func(id, addr string, a Answer)
	// OnRepublish, if set, hears the outcome of every PUT Republish made,
	// after OnWrite. Calls may be concurrent.
	OnRepublish func(id string, a Answer, err error)
}

// Answer is what the pool answered to one operation.
type Answer struct {
	Status   int    // HTTP status of the last attempt; 0 if none arrived
	Addr     string // the device's address (GET 200)
	Owner    string // the serving owner's name (Fuge-Owner)
	Gen      uint64 // its lease generation for the key (Fuge-Generation)
	Attempts int    // attempts made, 1 if the first one settled it
}

// Client publishes and resolves device addresses through a Fuge router,
// and remembers what it published so it can publish it again when the pool
// may have lost it (Centrifuge §4: clients recreate soft state). It is safe
// for concurrent use; operations on one device are serialized.
type Client struct {
	cfg  ClientConfig
	base string
	hc   *http.Client

	mu      sync.Mutex
	devices map[string]*device
}

// device is what the client published for one id; mu serializes writes.
type device struct {
	mu   sync.Mutex
	hash uint64
	addr string // last address Publish was asked to write
}

// NewClient validates cfg and returns a Client that has published nothing.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, ErrNoBaseURL
	}
	if _, err := url.Parse(cfg.BaseURL); err != nil {
		return nil, fmt.Errorf("presence: base URL: %w", err)
	}
	if cfg.Header == "" {
		cfg.Header = DefaultHeader
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"), hc: hc, devices: map[string]*device{}}, nil
}

// Publish sets the device's address and remembers it for Republish. The
// address is remembered even if the write fails, since it is what the
// pool should hold.
func (c *Client) Publish(ctx context.Context, id, addr string) (Answer, error) {
	if !validID(id) {
		return Answer{}, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	d := c.device(id)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addr = addr
	return c.put(ctx, id, addr)
}

// Get returns the device's address as the pool knows it. A device the
// pool does not know (never published, or lost with a server) is
// ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (Answer, error) {
	return c.do(ctx, http.MethodGet, id, "")
}

// Published returns the number of devices the client remembers.
func (c *Client) Published() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.devices)
}

// Affected returns, sorted, the published devices whose key hash lies in
// one of ranges (all of them if all is set): those the pool may have lost.
func (c *Client) Affected(ranges []ring.Range, all bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, d := range c.devices {
		if all || slices.ContainsFunc(ranges, func(r ring.Range) bool { return r.Contains(d.hash) }) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Republish writes again the remembered address of every Affected device,
// at most Concurrency at a time, and returns how many it attempted and the
// first error.
func (c *Client) Republish(ctx context.Context, ranges []ring.Range, all bool) (int, error) {
	ids := c.Affected(ranges, all)
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, c.cfg.Concurrency)
		errMu sync.Mutex
		first error
	)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d := c.device(id)
			d.mu.Lock()
			a, err := c.put(ctx, id, d.addr)
			d.mu.Unlock()
			if c.cfg.OnRepublish != nil {
				c.cfg.OnRepublish(id, a, err)
			}
			if err != nil {
				errMu.Lock()
				if first == nil {
					first = err
				}
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	return len(ids), first
}

// OnLoss is the loss-notification upcall for lb.LookupConfig.OnLoss: it
// republishes the devices in the lost ranges. It returns when they are
// written (or failed; see OnRepublish).
func (c *Client) OnLoss(ranges []ring.Range, all bool) {
	c.Republish(context.Background(), ranges, all)
}

func (c *Client) device(id string) *device {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.devices[id]
	if d == nil {
		d = &device{hash: ring.HashString(id)}
		c.devices[id] = d
	}
	return d
}

// put writes addr; the caller holds the device's lock.
func (c *Client) put(ctx context.Context, id, addr string) (Answer, error) {
	a, err := c.do(ctx, http.MethodPut, id, addr)
	if err == nil && c.cfg.OnWrite != nil {
		c.cfg.OnWrite(id, addr, a)
	}
	return a, err
}

// do runs one operation with its retries.
func (c *Client) do(ctx context.Context, method, id, body string) (Answer, error) {
	var a Answer
	if !validID(id) {
		return a, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	backoff := clientshell.Backoff{Base: DefaultBackoffBase, Max: DefaultBackoffMax}
	for k := 0; ; k++ {
		a.Attempts = k + 1
		retryAfter, err := c.once(ctx, method, id, body, &a)
		if err == nil || !errors.Is(err, ErrUnavailable) || a.Attempts == c.cfg.Attempts {
			return a, err
		}
		wait := max(backoff.Delay(k, rand.Float64()), min(retryAfter, DefaultBackoffMax))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return a, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// once makes one attempt and fills a. Failures worth retrying wrap
// ErrUnavailable.
func (c *Client) once(ctx context.Context, method, id, body string, a *Answer) (time.Duration, error) {
	var rd io.Reader
	if method == http.MethodPut {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/devices/"+url.PathEscape(id), rd)
	if err != nil {
		return 0, fmt.Errorf("presence: %w", err)
	}
	req.Header.Set(c.cfg.Header, id)
	resp, err := c.hc.Do(req)
	if err != nil {
		a.Status = 0
		if ctx.Err() != nil {
			return 0, fmt.Errorf("presence: %s %s: %w", method, id, err)
		}
		return 0, fmt.Errorf("%w: %s %s: %w", ErrUnavailable, method, id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	a.Status, a.Owner, a.Addr = resp.StatusCode, resp.Header.Get("Fuge-Owner"), ""
	a.Gen, _ = strconv.ParseUint(resp.Header.Get("Fuge-Generation"), 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: %s %s: reading the answer: %w", ErrUnavailable, method, id, err)
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent:
		a.Addr = string(bytes.TrimSpace(b))
		return 0, nil
	case resp.StatusCode == http.StatusNotFound:
		return 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	case resp.StatusCode == http.StatusServiceUnavailable:
		s, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return time.Duration(s) * time.Second, fmt.Errorf("%w: %s %s: %s", ErrUnavailable, method, id, strings.TrimSpace(string(b)))
	default:
		return 0, fmt.Errorf("presence: %s %s: %s: %s", method, id, resp.Status, strings.TrimSpace(string(b)))
	}
}

// validID reports whether id can be sent as a header value and a path
// segment unchanged by either.
func validID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}
