package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// keysLua is wrk's script: each request carries the next of 10,000
// distinct keys in X-Fuge-Key (formatted once, in init), and done prints
// the figures as one JSON line. wrk counts answers with a status of 400 or
// more as errors.status; the backends answer nothing else than 200, so
// any other 1xx-3xx answer cannot come from them either.
const keysLua = `
local reqs = {}
local n = 10000
local i = 0
init = function(args)
  for k = 1, n do
    reqs[k] = wrk.format("GET", "/", {["X-Fuge-Key"] = "key-" .. k})
  end
end
request = function()
  i = i % n + 1
  return reqs[i]
end
done = function(s, lat, req)
  local pcts = {}
  for _, p in ipairs({1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97.5, 99, 99.5, 99.9, 99.99}) do
    pcts[#pcts + 1] = string.format("[%g,%d]", p, lat:percentile(p))
  end
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"mean_us":%.1f,"max_us":%d,"pcts":[%s]}\n',
    s.requests, s.duration, s.errors.connect, s.errors.read, s.errors.write, s.errors.status, s.errors.timeout,
    lat.mean, lat.max, table.concat(pcts, ",")))
end
`

// wrkResult is one wrk run's figures.
type wrkResult struct {
	Requests   int64       `json:"requests"`
	DurationUS int64       `json:"duration_us"`
	Connect    int64       `json:"connect"`
	Read       int64       `json:"read"`
	Write      int64       `json:"write"`
	Status     int64       `json:"status"` // answers with status >= 400
	Timeout    int64       `json:"timeout"`
	MeanUS     float64     `json:"mean_us"`
	MaxUS      int64       `json:"max_us"`
	Pcts       [][]float64 `json:"pcts"` // [percentile, µs]
}

func (r wrkResult) rps() float64 {
	if r.DurationUS == 0 {
		return 0
	}
	return float64(r.Requests) / (float64(r.DurationUS) / 1e6)
}

// errors is every failed request or answer that was not 2xx.
func (r wrkResult) errors() int64 { return r.Connect + r.Read + r.Write + r.Status + r.Timeout }

// pct returns the latency at percentile p in µs.
func (r wrkResult) pct(p float64) float64 {
	for _, pv := range r.Pcts {
		if pv[0] == p {
			return pv[1]
		}
	}
	return 0
}

// runWrk runs wrk -t1 -c conns for d against addr on the client CPU.
func (b *bench) runWrk(addr string, conns int, d time.Duration) (wrkResult, error) {
	script := filepath.Join(b.dir, "keys.lua")
	if _, err := os.Stat(script); err != nil {
		if err := os.WriteFile(script, []byte(keysLua), 0o644); err != nil {
			return wrkResult{}, err
		}
	}
	args := []string{"-t1", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s", "--latency", "--timeout", "5s", "-s", script, "http://" + addr + "/"}
	bin := "wrk"
	if b.ps.pinned {
		args = append([]string{"-c", strconv.Itoa(clientCPU), bin}, args...)
		bin = "taskset"
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if js, ok := strings.CutPrefix(sc.Text(), "WRKJSON "); ok {
			var r wrkResult
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				return r, fmt.Errorf("wrk's summary %q: %w", js, err)
			}
			return r, nil
		}
	}
	return wrkResult{}, fmt.Errorf("wrk printed no summary: %s", out)
}
