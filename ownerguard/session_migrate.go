package ownerguard

import (
	"time"

	"github.com/fuge-project/fuge/ring"
)

// The session's migration glue: the session goroutine registers offers and
// starts fetches (migrate), feeds finished fetches to the Core (imported),
// ends expired offers, and on Close hands everything over first (handover).

// migrate registers the offers of a Core output and starts its imports.
func (s *session) migrate(out Output) {
	m := s.o.mig
	if m == nil {
		return
	}
	m.offer(out.Offers)
	for _, im := range out.Imports {
		m.wg.Add(1)
		go m.fetch(im)
	}
}

// migDone is the channel of finished imports, nil (never ready) when
// migration is off.
func (s *session) migDone() <-chan importResult {
	if s.o.mig == nil {
		return nil
	}
	return s.o.mig.done
}

// imported hands a finished import to the Core.
func (s *session) imported(r importResult) {
	now := s.now()
	if !r.ok {
		s.o.log.Warn("ownerguard: import failed; the range is handed over plainly", "range", r.im.Range, "from", r.im.Peer)
	}
	s.apply(s.core.Imported(r.im.Range, r.im.Gen, r.ok, now), now)
}

// expireOffers ends the offers that expired and returns the next offer
// deadline, zero if none.
func (s *session) expireOffers() time.Time {
	if s.o.mig == nil {
		return time.Time{}
	}
	return s.o.mig.expire(s.now())
}

// handover, on Close with migration, asks the manager to move every range
// elsewhere with its state, and runs the session until nothing is held and
// every export is over, or HandoverTimeout. What is not yet recalled is
// served meanwhile; what is left at the timeout is released by the
// leaving request as usual, plainly.
func (s *session) handover() {
	m := s.o.mig
	if m == nil || s.cur == nil || !s.open {
		return
	}
	now := s.now()
	if len(s.core.Held(now)) == 0 {
		return
	}
	timeout := time.NewTimer(s.cfg.Migration.HandoverTimeout)
	defer timeout.Stop()
	s.apply(s.core.Handover(now), now)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now = s.now()
		if len(s.core.Held(now)) == 0 && !m.pending() {
			s.o.log.Info("ownerguard: handed every range over")
			return
		}
		timer.Reset(max(s.deadline().Sub(now), 0))
		select {
		case e := <-s.events:
			s.handle(e)
		case r := <-m.done:
			s.imported(r)
		case <-m.wake:
		case <-timer.C:
			s.onTimer()
		case <-timeout.C:
			s.o.log.Warn("ownerguard: handover timed out; leaving with what is left", "held", len(s.core.Held(now)))
			return
		}
	}
}

// stopMigration ends the MigrationService and the fetches.
func (s *session) stopMigration() {
	if s.o.mig != nil {
		s.o.mig.stop()
	}
}

// revokedLate reports ranges revoked after the fact: ranges recalled for
// export, which the application keeps until the export is over.
func (o *Owner) revokedLate(rs []ring.Range) {
	if len(rs) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.signalLocked()
	if o.cfg.OnOwnership != nil {
		o.upcalls.Push(upcall{nil, rs})
	}
}

func (o *Owner) migCounters() MigrationCounters {
	if o.mig == nil {
		return MigrationCounters{}
	}
	return o.mig.counters()
}
