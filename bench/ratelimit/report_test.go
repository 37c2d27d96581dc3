package main

import (
	"math"
	"testing"
	"time"
)

// synthetic builds a run of one over-limit tenant (demand 300, L 100) on
// two proxies, admitted per window as given (split evenly), every proxy
// in view 1 of two members unless out says otherwise.
func synthetic(admitted []float64, out map[int]bool) *runData {
	n := len(admitted)
	rd := &runData{win: 500 * time.Millisecond, windows: n, proxies: 2, demand: []float64{300},
		got: newCounts(n, 2, 1), offered: newCounts(n, 2, 1), register: 2}
	for w, a := range admitted {
		rd.inView = append(rd.inView, []int{1, 1})
		rd.polls = append(rd.polls, []int{1, 1})
		rd.members = append(rd.members, []int{2, 2})
		rd.viewID = append(rd.viewID, []uint64{1, 1})
		if out[w] {
			rd.inView[w][1], rd.members[w][1], rd.viewID[w][1] = 0, 0, 0
			rd.members[w][0] = 1 // a view of one
		}
		for p := range 2 {
			for range int(a / 2) {
				rd.got.add(w, p, 0)
			}
			for range 75 {
				rd.offered.add(w, p, 0)
			}
		}
	}
	return rd
}

func TestReconverge(t *testing.T) {
	// L·win = 50 per window: 50 is on target, 30 is 40% short.
	rd := synthetic([]float64{50, 50, 30, 30, 30, 50, 40, 50, 50, 50, 50, 50}, nil)
	over := rd.over(100)
	ratio := func(w int) float64 { return rd.ratio(w, 100, over) / rd.target(w, 100, over) }
	if got, _ := rd.reconverge(2, 12, ratio); got != 5 { // back at window 7, for 7, 8, 9
		t.Fatalf("reconverged after %d windows, want 5", got)
	}
	// Negative control: a run that never gets back.
	never := synthetic([]float64{50, 30, 30, 30, 30, 30}, nil)
	if got, _ := never.reconverge(1, 6, func(w int) float64 { return never.ratio(w, 100, over) }); got != -1 {
		t.Fatalf("a run that never recovers reconverged after %d", got)
	}
	if r := rd.meanOver(0, time.Second, ratio); math.Abs(r-1) > 1e-9 {
		t.Fatalf("steady ratio %v", r)
	}
}

func TestOutsideAndTarget(t *testing.T) {
	// Proxy 1 is in no view in windows 2-5; its panic share is L/2 = 25
	// a window. Windows 3-5 count (the one before was outside too).
	out := map[int]bool{2: true, 3: true, 4: true, 5: true}
	rd := synthetic([]float64{50, 50, 50, 50, 50, 50, 50}, out)
	if r, n := rd.outside(100, rd.over(100)); n != 3 || math.Abs(r-1) > 1e-9 {
		t.Fatalf("outside %v over %d windows, want 1 over 3", r, n)
	}
	// The target with one proxy out: the view's L/2 plus the least of
	// offered (75) and the panic share (25): all of L.
	if tg := rd.target(3, 100, rd.over(100)); math.Abs(tg-1) > 1e-9 {
		t.Fatalf("target %v", tg)
	}
	// Negative control: a proxy outside that admits twice its share.
	bad := synthetic([]float64{50, 50, 100, 100, 100, 100, 50}, out)
	if r, _ := bad.outside(100, bad.over(100)); r < 1.5 {
		t.Fatalf("a proxy at twice its panic share measured %v", r)
	}
}
