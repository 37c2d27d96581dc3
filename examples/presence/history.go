package presence

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/ownerguard"
)

// RecordHistory serves srv behind guard and appends one line per answered
// request to w, for the fault harness's checkers:
//
//	<ns> <device id> <generation> <status>
//
// where ns is CLOCK_MONOTONIC, read inside the guard (after its first lease
// check, before its last), so that the owner believed it held the key at
// that instant. Only requests the guard let through and answered 2xx or 404
// are written; a refused one was not served. Each line is one write(2), so
// a kill -9 loses at most the requests in flight.
func RecordHistory(w io.Writer, guard *ownerguard.Guard, srv http.Handler) http.Handler {
	inner := guard.HTTP(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if at, ok := r.Context().Value(servedAt{}).(*int64); ok {
			*at = clientshell.SystemMonotonic()
		}
		srv.ServeHTTP(rw, r)
	}))
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var at int64
		sw := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
		inner.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), servedAt{}, &at)))
		if at == 0 || (sw.status >= 300 && sw.status != http.StatusNotFound) {
			return
		}
		fmt.Fprintf(w, "%d %s %s %d\n", at, strings.TrimPrefix(r.URL.Path, "/devices/"), sw.Header().Get(ownerguard.GenerationHeader), sw.status)
	})
}

type servedAt struct{}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}
