package proxy

import (
	"bytes"
	"errors"
	"fmt"
)

// Limits on what an owner may answer. An answer over them is a malformed
// answer: the attempt fails (502, or a retry for an idempotent request) and
// the connection is closed.
const (
	// maxResponseHeadBytes bounds an owner's status line and headers.
	maxResponseHeadBytes = 64 << 10
	// maxResponseBodyBytes bounds an owner's body: the proxy holds it whole
	// before answering, as fasthttp's client did.
	maxResponseBodyBytes = 1 << 30
	// maxChunkLineBytes bounds a chunk-size line, extensions included.
	maxChunkLineBytes = 4 << 10
	// maxInterimResponses bounds the 1xx answers skipped before the final one.
	maxInterimResponses = 8
)

// errMalformed wraps every reason an owner's answer is refused.
var errMalformed = errors.New("proxy: malformed response from owner")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
}

// respHead is an owner's response head, parsed by parseHead. Its slices
// point into the buffer parsed.
type respHead struct {
	status int
	reason []byte
	// length is the Content-Length, -1 when there is none.
	length int64
	// chunked: Transfer-Encoding: chunked frames the body.
	chunked bool
	// keepAlive: the connection may carry another request after this
	// answer (HTTP/1.1 without Connection: close, or HTTP/1.0 with
	// Connection: keep-alive).
	keepAlive bool
	// lost: the answer carries a non-empty LostHeader.
	lost bool
	// conn is the Connection header's values, comma-joined: the headers it
	// names are hop-by-hop.
	conn []byte
	// fields is the header lines, between the status line and the blank line.
	fields []byte
}

// parseHead parses the response head at the start of b. It returns the
// head's length, blank line included, or 0 when b does not hold all of it
// yet. Lines end in CRLF or a bare LF. It refuses what would let the
// owner's framing be read two ways (both Content-Length and
// Transfer-Encoding, differing Content-Lengths, a transfer coding other
// than chunked) and what no HTTP/1.1 server sends (obsolete line folding, a
// space before the colon, control characters in a value).
func parseHead(b []byte, h *respHead, lostKey string) (int, error) {
	*h = respHead{length: -1, conn: h.conn[:0]}
	line, rest, ok := nextLine(b)
	if !ok {
		if len(b) > maxResponseHeadBytes {
			return 0, malformed("head over %d bytes", maxResponseHeadBytes)
		}
		return 0, nil
	}
	var http11 bool
	switch {
	case len(line) >= 12 && bytes.HasPrefix(line, []byte("HTTP/1.1 ")):
		http11 = true
	case len(line) >= 12 && bytes.HasPrefix(line, []byte("HTTP/1.0 ")):
	default:
		return 0, malformed("status line %q", clip(line))
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, malformed("status line %q", clip(line))
		}
		h.status = h.status*10 + int(c-'0')
	}
	if h.status < 100 || len(line) > 12 && line[12] != ' ' {
		return 0, malformed("status line %q", clip(line))
	}
	if len(line) > 13 {
		h.reason = line[13:]
		if !validValue(h.reason) {
			return 0, malformed("reason phrase %q", clip(h.reason))
		}
	}
	h.keepAlive = http11
	fieldsStart := len(b) - len(rest)
	var te, sawLength, closeConn, keepAlive bool
	for {
		line, rest, ok = nextLine(rest)
		if !ok {
			if len(b) > maxResponseHeadBytes {
				return 0, malformed("head over %d bytes", maxResponseHeadBytes)
			}
			return 0, nil
		}
		if len(line) == 0 {
			break
		}
		k, v, err := splitField(line)
		if err != nil {
			return 0, err
		}
		switch {
		case equalFold(k, "Content-Length"):
			n, err := parseLength(v)
			if err != nil {
				return 0, err
			}
			if sawLength && n != h.length {
				return 0, malformed("Content-Length %d and %d", h.length, n)
			}
			sawLength, h.length = true, n
		case equalFold(k, "Transfer-Encoding"):
			if te || !equalFold(v, "chunked") || !http11 {
				return 0, malformed("Transfer-Encoding %q", clip(v))
			}
			te, h.chunked = true, true
		case equalFold(k, "Connection"):
			h.conn = append(append(h.conn, v...), ',')
			for b := v; len(b) > 0; {
				var tok []byte
				tok, b = nextToken(b)
				closeConn = closeConn || equalFold(tok, "close")
				keepAlive = keepAlive || equalFold(tok, "keep-alive")
			}
		case equalFold(k, lostKey):
			h.lost = h.lost || len(v) > 0
		}
	}
	if len(b)-len(rest) > maxResponseHeadBytes {
		return 0, malformed("head over %d bytes", maxResponseHeadBytes)
	}
	if te && sawLength {
		return 0, malformed("both Content-Length and Transfer-Encoding")
	}
	if h.length > maxResponseBodyBytes {
		return 0, malformed("Content-Length %d over %d", h.length, maxResponseBodyBytes)
	}
	h.keepAlive = !closeConn && (http11 || keepAlive)
	n := len(b) - len(rest)
	h.fields = b[fieldsStart:n]
	return n, nil
}

// hasBody reports whether the answer to a request (HEAD or not) with this
// head carries a body (RFC 9112 §6.3).
func (h *respHead) hasBody(head bool) bool {
	return !head && h.status >= 200 && h.status != 204 && h.status != 304
}

// eachField calls f with each header of fields (as parseHead left them)
// that a proxy forwards: neither hop-by-hop nor named in conn, nor the
// Content-Length the proxy sets itself.
func eachField(fields, conn []byte, f func(k, v []byte)) {
	for {
		line, rest, ok := nextLine(fields)
		if !ok || len(line) == 0 {
			return
		}
		fields = rest
		k, v, _ := splitField(line) // parseHead checked it
		if equalFold(k, "Content-Length") || in(k, hopHeaders[:]) || named(k, conn) {
			continue
		}
		f(k, v)
	}
}

// nextLine splits the first line off b, without its CRLF or LF; ok is
// false when b holds no whole line.
func nextLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, b, false
	}
	line, rest = b[:i], b[i+1:]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, rest, true
}

// splitField splits a header line into its name and its value, trimmed.
func splitField(line []byte) (k, v []byte, err error) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return nil, nil, malformed("header line %q", clip(line))
	}
	k, v = line[:i], trimOWS(line[i+1:])
	for _, c := range k {
		if !tokenChar(c) {
			return nil, nil, malformed("header name %q", clip(k))
		}
	}
	if !validValue(v) {
		return nil, nil, malformed("value of %q", clip(k))
	}
	return k, v, nil
}

// tokenChar reports whether c may appear in a header name (RFC 9110 §5.6.2).
func tokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// validValue reports whether v holds no control character but tab.
func validValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length value: decimal digits only.
func parseLength(v []byte) (int64, error) {
	if len(v) == 0 || len(v) > 18 {
		return 0, malformed("Content-Length %q", clip(v))
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, malformed("Content-Length %q", clip(v))
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

// parseChunkSize parses a chunk-size line (RFC 9112 §7.1), extensions
// ignored.
func parseChunkSize(line []byte) (int64, error) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = trimOWS(line)
	if len(line) == 0 || len(line) > 15 {
		return 0, malformed("chunk size %q", clip(line))
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, malformed("chunk size %q", clip(line))
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}

// clip shortens what an error quotes.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
