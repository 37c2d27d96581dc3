package presence

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// MaxAddrLen bounds a device address, in bytes.
const MaxAddrLen = 256

// Server is the presence service: device id -> address, in memory. It is an
// http.Handler meant to run behind ownerguard's middleware, which makes the
// ownership handle (step 1 of PRS Fig. 4) and checks it again after the
// handler (step 4). It is safe for concurrent use.
type Server struct {
	owner   ownerguard.Checker
	mux     *http.ServeMux
	mu      sync.Mutex
	devices map[string]record
}

// record is one device's state, tagged with the handle it was written under.
type record struct {
	addr string
	h    ownerguard.Handle
}

// NewServer returns an empty Server whose stored state is validated with
// owner (an *ownerguard.Owner, the one its guard asks).
func NewServer(owner ownerguard.Checker) *Server {
	s := &Server{owner: owner, mux: http.NewServeMux(), devices: map[string]record{}}
	s.mux.HandleFunc("PUT /devices/{id}", s.put)
	s.mux.HandleFunc("GET /devices/{id}", s.get)
	return s
}

// ServeHTTP serves PUT and GET /devices/{id}.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// handle is step 1: the guard made the handle for the routing key; it must
// be the device's, or state would be filed under another key's lease.
func handle(w http.ResponseWriter, r *http.Request) (string, ownerguard.Handle, bool) {
	id := r.PathValue("id")
	h, ok := ownerguard.HandleFromContext(r.Context())
	if !ok || h.Key != ring.HashString(id) {
		http.Error(w, "presence: the routing key must be the device id", http.StatusBadRequest)
		return "", h, false
	}
	return id, h, true
}

// put sets a device's address: body = the address.
func (s *Server) put(w http.ResponseWriter, r *http.Request) {
	id, h, ok := handle(w, r) // (1)
	if !ok {
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxAddrLen+1))
	addr := strings.TrimSpace(string(b))
	if err != nil || addr == "" || len(b) > MaxAddrLen {
		http.Error(w, "presence: the body must be an address of 1 to 256 bytes", http.StatusBadRequest)
		return
	}
	// (2) Nothing to validate: the old state is replaced.
	// (3) Store the new state with the handle it was made under.
	s.mu.Lock()
	s.devices[id] = record{addr: addr, h: h}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	// (4) and (5): the guard checks the lease covered the request, then
	// sends this answer, or a 503 if the lease was lost meanwhile.
}

// get returns a device's address.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id, _, ok := handle(w, r) // (1)
	if !ok {
		return
	}
	s.mu.Lock()
	rec, found := s.devices[id]
	// (2) State whose lease was lost since it was written is stale: another
	// server may have taken newer writes in between. Held now under its
	// generation means held ever since (generations are never reused).
	if found && !s.owner.CheckContinuousOwnership(rec.h) {
		delete(s.devices, id)
		found = false
	}
	s.mu.Unlock()
	if !found {
		http.Error(w, "presence: unknown device", http.StatusNotFound)
		return
	}
	// (3) The local operation: read the address.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, rec.addr+"\n")
	// (4) and (5) as in put.
}

// Drop is for the owner's ownership upcall (ownerguard.OwnerConfig's
// OnOwnership): given the revoked ranges, which another server may now own,
// it forgets the devices there whose lease was lost since they were
// written, and returns how many. Step (2) alone would never serve them;
// dropping frees the memory at once. State written since under a new grant
// of the same range (the upcall may come late) is kept.
func (s *Server) Drop(ranges []ring.Range) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, rec := range s.devices {
		for _, rg := range ranges {
			if rg.Contains(rec.h.Key) && !s.owner.CheckContinuousOwnership(rec.h) {
				delete(s.devices, id)
				n++
				break
			}
		}
	}
	return n
}

// Len returns the number of devices held, stale or not.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.devices)
}
