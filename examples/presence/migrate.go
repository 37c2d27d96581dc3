package presence

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// Server is an ownerguard.Migrator: on a clean handoff (a drain, a server's
// Close, a rebalancing move) its devices move with their range, so that the
// devices need not publish again.
var _ ownerguard.Migrator = (*Server)(nil)

// maxIDLen bounds a device id (validID).
const maxIDLen = 256

// ErrBadMigration is an import whose bytes are not an export of a range.
var ErrBadMigration = errors.New("presence: malformed migration")

// Export writes the devices of r stored under gen, the generation r was
// held under (state under any other generation is stale: step 2), as
// records of (uvarint length, id, uvarint length, address).
func (s *Server) Export(ctx context.Context, r ring.Range, gen lease.Gen, w io.Writer) error {
	s.mu.Lock()
	var recs [][2]string
	for id, rec := range s.devices {
		if rec.h.Gen == gen && r.Contains(rec.h.Key) {
			recs = append(recs, [2]string{id, rec.addr})
		}
	}
	s.mu.Unlock()
	bw := bufio.NewWriter(w)
	var n [binary.MaxVarintLen64]byte
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, f := range rec {
			bw.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
			bw.WriteString(f)
		}
	}
	return bw.Flush()
}

// Import reads what Export wrote and stores the devices under gen, the
// generation granted here, once all of it has been read and checked: an
// id must be valid and hash into r, an address at most MaxAddrLen bytes.
// A malformed or cut-off stream stores nothing.
func (s *Server) Import(ctx context.Context, r ring.Range, gen lease.Gen, rd io.Reader) error {
	br := bufio.NewReader(rd)
	got := map[string]record{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		id, err := readField(br, maxIDLen)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		addr, err := readField(br, MaxAddrLen)
		if err == io.EOF {
			return fmt.Errorf("%w: device %.40q has no address", ErrBadMigration, id)
		}
		if err != nil {
			return err
		}
		key := ring.HashString(id)
		if !validID(id) || !r.Contains(key) || addr == "" {
			return fmt.Errorf("%w: device %.40q does not belong to %v", ErrBadMigration, id, r)
		}
		got[id] = record{addr: addr, h: ownerguard.Handle{Key: key, Range: r, Gen: gen}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, rec := range got {
		s.devices[id] = rec
	}
	return nil
}

// readField reads one length-prefixed field of at most max bytes; io.EOF
// only at a clean end before it.
func readField(br *bufio.Reader, max int) (string, error) {
	n, err := binary.ReadUvarint(br)
	if err == io.EOF {
		return "", io.EOF
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadMigration, err)
	}
	if n > uint64(max) {
		return "", fmt.Errorf("%w: a field of %d bytes, at most %d", ErrBadMigration, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadMigration, err)
	}
	return string(b), nil
}
