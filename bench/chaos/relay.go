package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Partitions are made in user space (this kernel has no tc netem): every
// connection to a manager goes through a Relay that the harness controls.
// Managers advertise the relays' addresses, so owners, proxies, lookups and
// the other managers all reach them through it, even after following a
// standby to the leader. The relay tells which process opened a connection
// from the kernel's socket tables (/proc/net/tcp and /proc/<pid>/fd), so a
// cut can name its source: "p1 cannot reach m2", "m3 is cut from m1".

// Links holds the cuts: for a source process and a destination manager,
// whether bytes may flow up (source to manager) and down.
type Links struct {
	mu   sync.Mutex
	cut  map[[2]string][2]bool // {src, dst} -> {up blocked, down blocked}
	gen  chan struct{}         // closed and replaced on every change
	pids func() map[int]string // the processes the harness started, by pid
}

func newLinks(pids func() map[int]string) *Links {
	return &Links{cut: map[[2]string][2]bool{}, gen: make(chan struct{}), pids: pids}
}

// Set blocks (or, with both false, heals) src to dst.
func (l *Links) Set(src, dst string, upBlocked, downBlocked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !upBlocked && !downBlocked {
		delete(l.cut, [2]string{src, dst})
	} else {
		l.cut[[2]string{src, dst}] = [2]bool{upBlocked, downBlocked}
	}
	close(l.gen)
	l.gen = make(chan struct{})
}

// HealAll removes every cut.
func (l *Links) HealAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.cut)
	close(l.gen)
	l.gen = make(chan struct{})
}

// blocked reports whether the direction is cut, and a channel closed on the
// next change.
func (l *Links) blocked(src, dst string, down bool) (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cut[[2]string{src, dst}]
	if down {
		return c[1], l.gen
	}
	return c[0], l.gen
}

// Relay forwards connections on one listener to one manager port.
type Relay struct {
	ln     net.Listener
	dst    string // the manager's name
	target string // guarded by mu: SetTarget moves it
	links  *Links
	mu     sync.Mutex
	conns  map[net.Conn]string // -> the source process
	closed bool
}

func newRelay(dst, target string, links *Links) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, dst: dst, target: target, links: links, conns: map[net.Conn]string{}}
	go r.serve()
	return r, nil
}

// SetTarget points the relay at a manager's new port: the manager moved
// because another program took a port it was given (see
// Harness.reviveManagers). Connections already relayed keep their target.
func (r *Relay) SetTarget(target string) {
	r.mu.Lock()
	r.target = target
	r.mu.Unlock()
}

// Addr is the relay's address, the one the manager advertises.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.pipe(c)
	}
}

func (r *Relay) track(c net.Conn, src string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = src
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *Relay) pipe(in net.Conn) {
	src := peerProcess(in.RemoteAddr(), r.links.pids())
	r.mu.Lock()
	target := r.target
	r.mu.Unlock()
	out, err := net.Dial("tcp", target)
	if err != nil {
		in.Close()
		return
	}
	if !r.track(in, src) || !r.track(out, src) {
		in.Close()
		out.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { r.copy(out, in, src, false); done <- struct{}{} }()
	go func() { r.copy(in, out, src, true); done <- struct{}{} }()
	<-done
	r.untrack(in)
	r.untrack(out)
	<-done
}

// copy forwards one direction; while the link is cut it holds the bytes it
// read (and, by not reading, makes the sender's TCP window fill): packets
// stall, as behind a partition, and flow again when it heals.
func (r *Relay) copy(dst, src net.Conn, from string, down bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for n > 0 {
			cut, changed := r.links.blocked(from, r.dst, down)
			if !cut {
				break
			}
			<-changed
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Reset closes every connection through the relay from src, or from
// anyone if src is empty (a reset, as when a middlebox drops its state):
// clients reconnect, through the current cuts.
func (r *Relay) Reset(src string) {
	r.mu.Lock()
	var cs []net.Conn
	for c, from := range r.conns {
		if src == "" || from == src {
			cs = append(cs, c)
		}
	}
	r.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Close stops the relay and closes its connections.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.ln.Close()
	r.Reset("")
}

// peerProcess names the process that owns the other end of a loopback
// connection: the socket whose local address is remote, found in
// /proc/net/tcp, and the process among pids holding its inode. It returns
// "?" when none does (the harness itself, or a process that just exited).
func peerProcess(remote net.Addr, pids map[int]string) string {
	ta, ok := remote.(*net.TCPAddr)
	if !ok {
		return "?"
	}
	want := fmt.Sprintf("0100007F:%04X", ta.Port)
	inode := ""
	if f, err := os.Open("/proc/net/tcp"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && fs[1] == want {
				inode = fs[9]
				break
			}
		}
		f.Close()
	}
	if inode == "" {
		return "?"
	}
	target := "socket:[" + inode + "]"
	for pid, name := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == target {
				return name
			}
		}
	}
	return "?"
}
