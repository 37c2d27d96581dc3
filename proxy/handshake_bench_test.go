package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"testing"

	"github.com/fuge-project/fuge/fugetls"
)

// BenchmarkBackendTLSHandshake is the proxy's dial of an owner over mutual
// TLS (newPool's, with the proxy's client configuration) and one request
// on it, both ends in this process: full handshakes, and handshakes
// resumed from the session ticket of an earlier connection
// (ClientSessionCache), which the proxy does not use because they save
// little (1.3-1.5 ms against 1.8-2.1 on this machine with -cpu 1).
func BenchmarkBackendTLSHandshake(b *testing.B) {
	dir := certDir(b)
	o := startTLSOwner(b, "a", loadSource(b, dir, fugetls.OwnerBase("ns", "a")))
	for _, resume := range []bool{false, true} {
		name := map[bool]string{false: "full", true: "resumed"}[resume]
		b.Run(name, func(b *testing.B) {
			conf := loadSource(b, dir, fugetls.ProxyBase).ClientConfig(fugetls.RoleOwner)
			if resume {
				conf.ClientSessionCache = tls.NewLRUClientSessionCache(8)
			}
			p := newPool(o.addr, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }, conf, defaultTestTimeout, 1)
			// The answer's first byte is read after the ticket (TLS 1.3
			// sends it after the handshake), so the cache holds it.
			dial := func() bool {
				c, err := p.dial()
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
					b.Fatal(err)
				}
				var one [1]byte
				if _, err := io.ReadFull(c, one[:]); err != nil {
					b.Fatal(err)
				}
				return c.(*tls.Conn).ConnectionState().DidResume
			}
			dial()
			resumed := 0
			for b.Loop() {
				if dial() {
					resumed++
				}
			}
			b.ReportMetric(float64(resumed)/float64(b.N), "resumed/op")
		})
	}
}
