package main

import "time"

// scheduleFaults draws the fault schedule: owner crash and restart (same
// name, new incarnation), pauses longer than a lease, partitions of owners
// and lookups, joins and leaves, manager failovers, and a new incarnation
// started under a live owner's name while the old one runs on, cut off
// (with a failover during it half the time). Half the restarts and leaves are clean
// (Owner.Close: Core.Leave), half are crashes.
func (w *world) scheduleFaults() {
	var next func()
	next = func() {
		if !w.faults {
			return
		}
		w.randomFault()
		w.s.after(w.s.uniform(w.p.FaultEvery/2, w.p.FaultEvery*3/2), next)
	}
	w.s.after(w.s.uniform(0, w.p.FaultEvery), next)
}

func (w *world) live() []*ownerNode {
	var out []*ownerNode
	for _, o := range w.order {
		if o.core != nil && !o.gone {
			out = append(out, o)
		}
	}
	return out
}

// serving counts owners that run and are not draining or gone.
func (w *world) serving() int {
	n := 0
	for _, o := range w.order {
		if o.core != nil && !o.gone && !o.draining {
			n++
		}
	}
	return n
}

func (w *world) randomFault() {
	s := w.s
	live := w.live()
	pick := func() *ownerNode {
		if len(live) == 0 {
			return nil
		}
		return live[s.rnd.IntN(len(live))]
	}
	T := w.p.T
	switch k := s.rnd.IntN(12); {
	case k == 11: // a second incarnation of a live owner's name
		if o := pick(); o != nil && o.twin == nil && s.now >= o.pausedUntil {
			d := s.uniform(T/10, 3*T)
			w.logf("split %s: its running incarnation is cut off for %v and a new one starts under the same name", o.name, d)
			o.split(d)
			if s.rnd.IntN(2) == 0 { // and the manager's leader fails over meanwhile
				s.after(s.uniform(0, T), func() {
					w.logf("manager failover (during a split)")
					w.mgr.failover()
				})
			}
		}
	case k == 10: // the manager's leader fails over
		w.logf("manager failover")
		w.mgr.failover()
	case k < 2: // crash or close, restart later under a new incarnation
		if o := pick(); o != nil {
			w.stop(o)
			s.after(s.uniform(T/20, 2*T), func() {
				if !o.gone && o.core == nil {
					w.logf("restart %s", o.name)
					o.start()
				}
			})
		}
	case k < 4: // pause, sometimes longer than a lease
		if o := pick(); o != nil && s.now >= o.pausedUntil {
			d := s.uniform(T/10, 2*T)
			w.logf("pause %s for %v", o.name, d)
			o.pausedUntil = s.now + d
		}
	case k < 6: // partition an owner or a lookup from the manager
		name := ""
		if s.rnd.IntN(3) == 0 && len(w.lookups) > 0 {
			name = w.lookups[s.rnd.IntN(len(w.lookups))].name
		} else if o := pick(); o != nil {
			name = o.name
		}
		if name != "" && !w.net.partitioned[name] {
			d := s.uniform(T/10, 2*T)
			w.logf("partition %s for %v", name, d)
			w.net.partitioned[name] = true
			s.after(d, func() { delete(w.net.partitioned, name) })
		}
	case k < 8: // join
		if len(w.order) < w.p.MaxOwners {
			o := w.addOwner()
			w.logf("join %s", o.name)
		}
	case k < 9: // leave for good, keeping at least one serving owner
		if o := pick(); o != nil && (o.draining || w.serving() > 1) {
			w.logf("leave %s", o.name)
			w.stop(o)
			o.gone = true
		}
	default: // drain an owner through the manager
		if o := pick(); o != nil && !o.draining && w.serving() > 1 {
			o.draining = true
			w.logf("drain %s", o.name)
			out, err := w.mgr.core.Drain(namespace, o.name, w.mgr.now())
			if err == nil {
				w.mgr.handle(out)
				// A drained owner leaves once drained; model it leaving later.
				s.after(s.uniform(T/10, T), func() {
					if !o.gone {
						w.logf("leave %s (drained)", o.name)
						w.stop(o)
						o.gone = true
					}
				})
			}
		}
	}
}

// stop ends o's running incarnation: a clean leave or a crash, at random.
func (w *world) stop(o *ownerNode) {
	if w.s.rnd.IntN(2) == 0 {
		w.logf("close %s (clean leave)", o.name)
		o.leave()
		return
	}
	w.logf("crash %s", o.name)
	o.crash()
}

// endFaults stops every fault: partitions heal, pauses end, crashed owners
// that were to restart restart, and the links stop losing and duplicating
// (delay and reordering go on).
func (w *world) endFaults() {
	w.faults = false
	w.logf("faults end")
	clear(w.net.partitioned)
	w.net.faults.drop, w.net.faults.dup = 0, 0
	for _, o := range w.order {
		if o.pausedUntil > w.s.now {
			o.pausedUntil = w.s.now
		}
		if o.core == nil && !o.gone {
			o.start()
		}
	}
	_ = time.Second
}
