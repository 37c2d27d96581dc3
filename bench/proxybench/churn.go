package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Item 3: the cost of inconsistency. The presence example behind each
// balancer while the first of its three servers restarts every churnEvery
// (SIGTERM, down for churnDown, started again at the same address, empty);
// clients write and read device addresses. Behind fuge-proxy the servers are presence-server
// (leases, ownerguard); behind HAProxy and nginx they are the same presence
// service with no lease (servers.go), health-checked as one would run it.
// Counted from the clients' records and the servers' history files, never
// asserted.

// presencePool is three presence servers and their incarnations.
type presencePool struct {
	name    string // "leased" or "unleased"
	leased  bool
	addrs   []string
	names   []string
	cur     []*proc
	inc     []int
	history string // directory of history files, one per incarnation
}

func (b *bench) startPresencePool(name string, leased bool) (*presencePool, error) {
	pp := &presencePool{name: name, leased: leased, history: filepath.Join(b.dir, "history", name)}
	if err := os.MkdirAll(pp.history, 0o755); err != nil {
		return nil, err
	}
	for i := range 3 {
		n := fmt.Sprintf("p%d", i+1)
		if !leased {
			n = fmt.Sprintf("u%d", i+1)
		}
		pp.names, pp.addrs = append(pp.names, n), append(pp.addrs, freePort())
		pp.cur, pp.inc = append(pp.cur, nil), append(pp.inc, 0)
		if err := b.startPresence(pp, i); err != nil {
			return nil, err
		}
	}
	if leased {
		return pp, b.waitSettled(nsPresence, 30*time.Second, pp.names...)
	}
	return pp, nil
}

// startPresence starts the next incarnation of server i of pp.
func (b *bench) startPresence(pp *presencePool, i int) error {
	pp.inc[i]++
	hist := filepath.Join(pp.history, fmt.Sprintf("%s#%d", pp.names[i], pp.inc[i]))
	var err error
	if pp.leased {
		pp.cur[i], err = b.ps.start(pp.names[i], clientCPU, nil, filepath.Join(b.bin, "presence-server"),
			"--name", pp.names[i], "--listen", pp.addrs[i], "--managers", b.mgrGRPC, "--namespace", nsPresence,
			"--lease-duration", churnT.String(), "--history", hist, "--tls-dir", b.certs)
	} else {
		self, _ := os.Executable()
		pp.cur[i], err = b.ps.start(pp.names[i], clientCPU, nil, self, "presence",
			"-name", pp.names[i], "-listen", pp.addrs[i], "-history", hist)
	}
	if err != nil {
		return err
	}
	return waitTCP(pp.addrs[i], 10*time.Second)
}

// churnRow is one balancer's figures.
type churnRow struct {
	Balancer, Servers string
	Seconds           float64
	Restarts          int
	Writes, WritesOK  int64
	Reads, ReadsOK    int64
	Stale             int64 // reads older than the last acknowledged write
	Lost              int64 // reads finding nothing after an acknowledged write
	Failed            int64 // calls without a 2xx or 404 answer
	SplitWrites       int64 // writes accepted inside another server's write interval for the key
	SplitKeys         int
	prefix            string
}

// churnDevices is the number of devices each row writes and reads.
const (
	churnDevices = 240
	churnClients = 8
)

// runChurn drives clients through t for d while restarting pp's servers.
func (b *bench) runChurn(row int, t *target, pp *presencePool, servers string) churnRow {
	r := churnRow{Balancer: t.name, Servers: servers, prefix: fmt.Sprintf("r%d-", row)}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.churnDur)
	defer cancel()
	var restarts sync.WaitGroup
	restarts.Add(1)
	go func() {
		defer restarts.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(b.cfg.churnEvery):
			}
			const k = 0 // the same server each time: its keys move away and back
			b.ps.stop(pp.cur[k], 2*time.Second)
			time.Sleep(b.cfg.churnDown)
			if err := b.startPresence(pp, k); err != nil {
				log.Printf("churn: restart %s: %v", pp.names[k], err)
			}
			r.Restarts++
		}
	}()
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range churnClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := churnClient{hc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
				addr: t.addr, rng: rand.New(rand.NewPCG(uint64(row), uint64(c))), acked: map[string]int{}, next: map[string]int{}}
			for d := c; d < churnDevices; d += churnClients {
				cl.devices = append(cl.devices, r.prefix+"dev-"+strconv.Itoa(d))
			}
			cl.run(ctx)
			mu.Lock()
			r.Writes += cl.writes
			r.WritesOK += cl.writesOK
			r.Reads += cl.reads
			r.ReadsOK += cl.readsOK
			r.Stale += cl.stale
			r.Lost += cl.lost
			r.Failed += cl.failed
			mu.Unlock()
		}()
	}
	wg.Wait()
	restarts.Wait()
	r.Seconds = time.Since(start).Seconds()
	// Every server up again for the next row.
	for i, p := range pp.cur {
		if p.Exited() {
			b.startPresence(pp, i)
		}
	}
	return r
}

// churnClient owns its devices: it alone writes them, so the last
// acknowledged write of each is known exactly when it reads.
type churnClient struct {
	hc                  *http.Client
	addr                string
	rng                 *rand.Rand
	devices             []string
	acked, next         map[string]int // sequence numbers of values
	writes, writesOK    int64
	reads, readsOK      int64
	stale, lost, failed int64
}

func (c *churnClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		dev := c.devices[c.rng.IntN(len(c.devices))]
		if c.rng.IntN(2) == 0 {
			c.next[dev]++
			seq := c.next[dev]
			c.writes++
			code, _ := c.call(ctx, http.MethodPut, dev, "10.0.0."+strconv.Itoa(seq%250)+":"+strconv.Itoa(seq))
			if code == http.StatusNoContent {
				c.writesOK++
				c.acked[dev] = max(c.acked[dev], seq)
			} else if code != 0 || ctx.Err() == nil {
				c.failed++
			}
		} else {
			c.reads++
			code, val := c.call(ctx, http.MethodGet, dev, "")
			switch code {
			case http.StatusOK:
				c.readsOK++
				_, s, _ := strings.Cut(strings.TrimSpace(val), ":")
				if seq, err := strconv.Atoi(s); err == nil && seq < c.acked[dev] {
					c.stale++
				}
			case http.StatusNotFound:
				c.readsOK++
				if c.acked[dev] > 0 {
					c.lost++
				}
			default:
				if ctx.Err() == nil {
					c.failed++
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// call returns the status (0: no answer) and body.
func (c *churnClient) call(ctx context.Context, method, dev, body string) (int, string) {
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+c.addr+"/devices/"+dev, strings.NewReader(body))
	req.Header.Set("X-Fuge-Key", dev)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode, string(b)
}

// serve is one write a server accepted, from its history file.
type serve struct {
	at     int64
	holder string // process incarnation and generation
}

// splitBrain counts, per row prefix, the writes a server accepted while
// another server's interval of accepted writes for the same key (from its
// first to its last, per process incarnation and generation) was open.
func splitBrain(historyDirs []string, rows []churnRow) {
	writes := map[string][]serve{} // device -> writes
	for _, dir := range historyDirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(fh)
			for sc.Scan() {
				fs := strings.Fields(sc.Text())
				if len(fs) != 4 || fs[3] != "204" {
					continue // a read, or a line cut by the kill
				}
				at, err := strconv.ParseInt(fs[0], 10, 64)
				if err != nil {
					continue
				}
				writes[fs[1]] = append(writes[fs[1]], serve{at: at, holder: filepath.Base(f) + "/" + fs[2]})
			}
			fh.Close()
		}
	}
	for i := range rows {
		r := &rows[i]
		for dev, ws := range writes {
			if !strings.HasPrefix(dev, r.prefix) {
				continue
			}
			type span struct{ from, to int64 }
			spans := map[string]*span{}
			for _, w := range ws {
				if s := spans[w.holder]; s == nil {
					spans[w.holder] = &span{w.at, w.at}
				} else {
					s.from, s.to = min(s.from, w.at), max(s.to, w.at)
				}
			}
			n := int64(0)
			for _, w := range ws {
				for h, s := range spans {
					if h != w.holder && s.from < w.at && w.at < s.to {
						n++
						break
					}
				}
			}
			r.SplitWrites += n
			if n > 0 {
				r.SplitKeys++
			}
		}
	}
}
