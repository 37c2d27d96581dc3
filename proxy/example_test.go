package proxy_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/fuge-project/fuge/proxy"
)

// fuge-proxy in a program of one's own: follow namespace "devices" from
// three managers, serve on :8080 with /metrics and /healthz on :8081, and
// drain for up to 30 s on interrupt.
func ExampleNew() {
	p, err := proxy.New(proxy.Config{
		ListenAddr: ":8080",
		AdminAddr:  ":8081",
		Managers:   []string{"10.0.0.1:7401", "10.0.0.2:7401", "10.0.0.3:7401"},
		Namespace:  "devices",
		// Everything else has the defaults: X-Fuge-Key, 400 without it,
		// the lease ring, a 2 s retry budget with backoff from 5 ms.
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Shutdown(drain); err != nil {
		log.Print("requests still in flight: ", err)
	}
}
