package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"testing"

	"github.com/fuge-project/fuge/fugetls"
)

// BenchmarkBackendTLSHandshake is one mutual-TLS handshake between the
// proxy's client configuration and an owner's server configuration over
// loopback (both ends in this process): full, and resumed from a session
// ticket of an earlier connection (ClientSessionCache).
func BenchmarkBackendTLSHandshake(b *testing.B) {
	dir := certDir(b)
	srvConf := loadSource(b, dir, fugetls.OwnerBase("ns", "a")).ServerConfig(false, fugetls.RoleProxy)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(c, srvConf)
				if tc.Handshake() == nil {
					tc.Write([]byte("x")) // carries the ticket (TLS 1.3) to the client
				}
				io.Copy(io.Discard, tc)
				tc.Close()
			}()
		}
	}()
	for _, resume := range []bool{false, true} {
		name := map[bool]string{false: "full", true: "resumed"}[resume]
		b.Run(name, func(b *testing.B) {
			conf := loadSource(b, dir, fugetls.ProxyBase).ClientConfig(fugetls.RoleOwner)
			conf.ServerName = "127.0.0.1"
			if resume {
				conf.ClientSessionCache = tls.NewLRUClientSessionCache(8)
			}
			dial := func() bool {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				tc := tls.Client(c, conf)
				if err := tc.Handshake(); err != nil {
					b.Fatal(err)
				}
				var one [1]byte
				if _, err := io.ReadFull(tc, one[:]); err != nil {
					b.Fatal(err)
				}
				did := tc.ConnectionState().DidResume
				tc.Close()
				return did
			}
			dial()
			resumed := 0
			b.ResetTimer()
			for b.Loop() {
				if dial() {
					resumed++
				}
			}
			b.ReportMetric(float64(resumed)/float64(b.N), "resumed/op")
		})
	}
}
