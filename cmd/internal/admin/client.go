// Package admin is a client for the manager's admin HTTP API (JSON), for
// fugectl and other tools under cmd/.
//
// A Client is given every manager address it may use and tries them in
// order: a manager that refuses the connection, or answers 503 because it
// knows no leader, is skipped. Requests that change state are retried on
// the next address only when the connection was never made, so they are
// never applied twice. Redirects (a follower sending a write to the
// leader's 307 or 308) are followed with the body re-sent.
//
// A Client speaks one scheme: https with mutual TLS when it is given a TLS
// configuration (fugetls.Source.ClientConfig: the manager is checked by the
// cluster's CA and its manager role, not by host name), plain http without
// one (managers run with --insecure, and tests). A redirect keeps the
// client's scheme, so a standby that names its leader with http:// cannot
// downgrade a TLS client.
package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrUnreachable is returned, wrapped with each address's error, when no
// manager could be reached.
var ErrUnreachable = errors.New("no manager reachable")

// APIError is an error answer from a manager: a 4xx or 5xx status with the
// API's {"error": "..."} body.
type APIError struct {
	Status  int    // HTTP status code
	Message string // the API's error message, or the body when it sent no JSON
}

func (e *APIError) Error() string { return e.Message }

// Client calls the admin API of a set of managers. It is safe for
// concurrent use.
type Client struct {
	bases  []string // base URLs without a trailing slash
	scheme string   // "https" or "http"
	hc     *http.Client
	token  string // admin bearer token, or ""
}

// SetToken makes every request carry token as "Authorization: Bearer",
// also after a redirect to the leader. Call it before the first request.
func (c *Client) SetToken(token string) { c.token = token }

// maxRedirects bounds the redirects one request follows.
const maxRedirects = 10

// checkRedirect keeps the client's scheme and the token on a redirect.
func (c *Client) checkRedirect(r *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	r.URL.Scheme = c.scheme
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	return nil
}

// DialTimeout bounds each connection attempt, so that an unreachable
// address costs little before the next is tried.
const DialTimeout = 3 * time.Second

// ErrScheme is a manager URL whose scheme is not the client's: http://
// for a TLS client, https:// for a plain one.
var ErrScheme = errors.New("admin: wrong scheme")

// New returns a client for addrs, each HOST:PORT or a URL. With tlsConf the
// client speaks https (HOST:PORT means https://HOST:PORT); with nil, plain
// http. Its connections time out after DialTimeout; bound whole calls with
// their context.
func New(addrs []string, tlsConf *tls.Config) (*Client, error) {
	c := &Client{scheme: "http"}
	if tlsConf != nil {
		c.scheme = "https"
	}
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = c.scheme + "://" + a
		}
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("manager address %q: want HOST:PORT or an http(s) URL", a)
		}
		if u.Scheme != c.scheme {
			return nil, fmt.Errorf("%w: manager address %q: this client speaks %s", ErrScheme, a, c.scheme)
		}
		c.bases = append(c.bases, strings.TrimSuffix(a, "/"))
	}
	if len(c.bases) == 0 {
		return nil, errors.New("no manager address given")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: DialTimeout}).DialContext
	t.TLSClientConfig = tlsConf
	c.hc = &http.Client{Transport: t, CheckRedirect: c.checkRedirect}
	return c, nil
}

// Call sends method path (which starts with /v1/) with in, if not nil, as
// its JSON body, and returns the raw body of a 2xx answer, after decoding
// it into out if out is not nil and the body is not empty. An error answer
// is an *APIError.
func (c *Client) Call(ctx context.Context, method, path string, in, out any) ([]byte, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, err
		}
	}
	var failures []string
	var lastAPI *APIError
	for _, base := range c.bases {
		raw, err := c.once(ctx, method, base+path, body)
		var apiErr *APIError
		switch {
		case err == nil:
			if out != nil && len(raw) > 0 {
				if err := json.Unmarshal(raw, out); err != nil {
					return raw, fmt.Errorf("%s %s: bad answer from %s: %w", method, path, base, err)
				}
			}
			return raw, nil
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable:
			lastAPI = apiErr // maybe another manager knows a leader
		case errors.As(err, &apiErr):
			return nil, err
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s: %w", base, err)
		case method != http.MethodGet && !isDialError(err):
			// The request may have reached the manager: do not repeat it.
			return nil, fmt.Errorf("%s: %w", base, err)
		default:
			failures = append(failures, fmt.Sprintf("%s: %v", base, err))
		}
	}
	if lastAPI != nil {
		return nil, lastAPI
	}
	return nil, fmt.Errorf("%w (%s)", ErrUnreachable, strings.Join(failures, "; "))
}

// once makes one request to one manager.
func (c *Client) once(ctx context.Context, method, u string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body) // re-readable, so 307 and 308 re-send it
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said by the caller
		}
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		return nil, apiError(resp.StatusCode, raw)
	}
	return raw, nil
}

func apiError(status int, raw []byte) *APIError {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return &APIError{Status: status, Message: e.Error}
	}
	msg := strings.TrimSpace(string(raw))
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &APIError{Status: status, Message: fmt.Sprintf("%s (HTTP %d)", msg, status)}
}

// isDialError reports whether err happened before a connection was made.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Paths of the admin API, with names escaped.

// NamespacesPath is /v1/namespaces.
const NamespacesPath = "/v1/namespaces"

// ClusterPath is /v1/cluster.
const ClusterPath = "/v1/cluster"

// NamespacePath is /v1/namespaces/{ns}, followed by the elements of sub.
func NamespacePath(ns string, sub ...string) string {
	p := NamespacesPath + "/" + url.PathEscape(ns)
	for _, s := range sub {
		p += "/" + url.PathEscape(s)
	}
	return p
}
