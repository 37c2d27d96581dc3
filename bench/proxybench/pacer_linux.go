package main

import (
	"encoding/binary"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pace calls send(k) for k in [0, n) at start + k·every, each as soon as
// it is due: a periodic timerfd, which the kernel fires from a
// high-resolution timer, read through the runtime's poller. A late wake-up
// sends every request due by then at once, in order.
func pace(start time.Time, every time.Duration, n int, send func(k int)) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		paceSleeping(start, every, n, send)
		return
	}
	f := os.NewFile(uintptr(fd), "pacer")
	defer f.Close()
	// The first expiry is relative: CLOCK_MONOTONIC is not time.Time's.
	first := max(time.Until(start), time.Microsecond)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(first)), Interval: unix.NsecToTimespec(int64(every))}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		paceSleeping(start, every, n, send)
		return
	}
	var b [8]byte
	for k := 0; k < n; {
		if _, err := f.Read(b[:]); err != nil {
			paceSleeping(start.Add(time.Duration(k)*every), every, n-k, func(j int) { send(k + j) })
			return
		}
		for e := binary.NativeEndian.Uint64(b[:]); e > 0 && k < n; e-- {
			send(k)
			k++
		}
	}
}
