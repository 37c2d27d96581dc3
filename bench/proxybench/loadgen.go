package main

import (
	"bufio"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The harness's own load generators, for what wrk does not measure: an
// open-loop one at a constant rate (item 2b) and a closed-loop one that
// keeps every answer's completion time (item 4). Both send the keys wrk
// sends, one request at a time per connection, over keep-alive
// connections, from the harness's CPU.

const nKeys = 10000

// requests returns the 10,000 keyed GETs, formatted once.
func requests(addr string) [][]byte {
	out := make([][]byte, nKeys)
	for i := range out {
		out[i] = []byte("GET / HTTP/1.1\r\nHost: " + addr + "\r\nX-Fuge-Key: key-" + strconv.Itoa(i+1) + "\r\n\r\n")
	}
	return out
}

// httpConn is one keep-alive connection.
type httpConn struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
	resp fasthttp.Response
}

// do sends req and reads the answer; it reports whether it was 2xx. On
// an error the connection is closed and redialed on the next call.
func (h *httpConn) do(req []byte) (ok bool, err error) {
	if h.c == nil {
		c, err := net.DialTimeout("tcp", h.addr, time.Second)
		if err != nil {
			return false, err
		}
		h.c, h.br = c, bufio.NewReaderSize(c, 4096)
	}
	h.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := h.c.Write(req); err != nil {
		h.close()
		return false, err
	}
	if err := h.resp.Read(h.br); err != nil {
		h.close()
		return false, err
	}
	code := h.resp.StatusCode()
	if h.resp.ConnectionClose() {
		h.close()
	}
	return code/100 == 2, nil
}

func (h *httpConn) close() {
	if h.c != nil {
		h.c.Close()
		h.c = nil
	}
}

// openLoopResult is an open-loop run: latencies in µs, sorted.
type openLoopResult struct {
	Rate, Conns    int
	Sent, Failed   int64
	Lat            []float64 // every completed request's time, µs, sorted
	P50, P99, P999 float64
}

// openLoop sends rate requests a second over conns connections for d,
// each connection on a fixed schedule (its share of the rate, staggered:
// request k of the run is due at k/rate and goes on connection k mod
// conns), whatever the answers do: a slow answer delays the connection's
// next requests, and their time counts from when they were due (no
// coordinated omission).
//
// The schedule is kept by a pacer (pacer_linux.go) that wakes at each
// request's due time to the microsecond. Go's own timers wake on the
// runtime poller's timeout, in whole milliseconds (a 100 µs time.Sleep
// took 1.07 ms here): paced by them, the 5,000 requests a second went out
// in bursts of five at each millisecond, and their queueing, at the
// backends as much as at the proxies, was most of what was measured (p50
// 115 µs direct against 16 µs with wrk -c1). What lateness remains, the
// pacer's or the connection goroutine's wake-up while the connection was
// idle and could have sent on time, is taken out.
func openLoop(addr string, rate, conns int, d time.Duration) openLoopResult {
	reqs := requests(addr)
	every := time.Second / time.Duration(rate)
	total := int(d / every)
	start := time.Now().Add(50 * time.Millisecond)
	res := openLoopResult{Rate: rate, Conns: conns}
	due := make([]chan int, conns) // request numbers, to each connection
	for i := range due {
		due[i] = make(chan int, total/conns+2)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &httpConn{addr: addr}
			defer h.close()
			lat := make([]float64, 0, total/conns+2)
			var sent, failed int64
			prevDone := start
			for k := range due[i] {
				at := start.Add(time.Duration(k) * every)
				sendAt := time.Now()
				ok, _ := h.do(reqs[k%nKeys])
				done := time.Now()
				sent++
				if !ok {
					failed++
				}
				ready := at // when the request could have gone out
				if prevDone.After(ready) {
					ready = prevDone
				}
				slack := max(0, sendAt.Sub(ready)) // the generator's own lateness
				lat = append(lat, float64(done.Sub(at)-slack)/1e3)
				prevDone = done
			}
			mu.Lock()
			res.Sent += sent
			res.Failed += failed
			res.Lat = append(res.Lat, lat...)
			mu.Unlock()
		}()
	}
	pace(start, every, total, func(k int) { due[k%conns] <- k })
	for _, ch := range due {
		close(ch)
	}
	wg.Wait()
	slices.Sort(res.Lat)
	res.P50, res.P99, res.P999 = quantile(res.Lat, 0.50), quantile(res.Lat, 0.99), quantile(res.Lat, 0.999)
	return res
}

// quantile of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q * float64(len(xs)))
	if i >= len(xs) {
		i = len(xs) - 1
	}
	return xs[i]
}

// sample is one answer of the closed-loop generator.
type sample struct {
	At  time.Duration // completion, since the start
	Lat time.Duration
	OK  bool
}

// closedLoop keeps conns connections busy for d and returns every answer.
// event, if set, runs at 'at' after the start.
func closedLoop(addr string, conns int, d time.Duration, at time.Duration, event func()) []sample {
	reqs := requests(addr)
	start := time.Now()
	end := start.Add(d)
	var mu sync.Mutex
	var out []sample
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &httpConn{addr: addr}
			defer h.close()
			var mine []sample
			for k := 0; time.Now().Before(end); k++ {
				t0 := time.Now()
				ok, err := h.do(reqs[(i+k*conns)%nKeys])
				t1 := time.Now()
				mine = append(mine, sample{At: t1.Sub(start), Lat: t1.Sub(t0), OK: ok && err == nil})
				if err != nil {
					time.Sleep(time.Millisecond)
				}
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	if event != nil {
		time.Sleep(time.Until(start.Add(at)))
		event()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b sample) int { return int(a.At - b.At) })
	return out
}

// paceSleeping is pace on Go's timers, where there is no timerfd.
func paceSleeping(start time.Time, every time.Duration, n int, send func(k int)) {
	for k := range n {
		if w := time.Until(start.Add(time.Duration(k) * every)); w > 0 {
			time.Sleep(w)
		}
		send(k)
	}
}
