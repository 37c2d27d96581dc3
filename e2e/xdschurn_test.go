package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/ownerguard"
)

// churn keeps RPCs flowing while the ring changes. Each RPC that fails
// with codes.Unavailable (a guard's refusal that the route's retries did
// not get past, or a server that went away) is retried with backoff until
// it is answered; every answer is kept to be checked against the grants.
type churn struct {
	x        *xdsRun
	done     chan struct{}
	wg       sync.WaitGroup
	refused0 uint64
	probes0  int64 // x.probeRefusals at the start
	rpcs     atomic.Int64
	// Failed attempts that the client retried: refused by a guard (after
	// the route's retries, if any), or Unavailable for another reason (a
	// server that went away).
	sawRefusal, sawGone atomic.Int64

	mu      sync.Mutex
	answers []keyAnswer
	errs    []error
}

type keyAnswer struct {
	key int
	a   answer
}

type churnStats struct {
	rpcs, refused, sawRefusal, sawGone, bad int
}

func (x *xdsRun) startChurn() *churn {
	c := &churn{x: x, done: make(chan struct{}), refused0: x.refused(), probes0: x.probeRefusals.Load()}
	for w := range xdsChurn {
		c.wg.Go(func() {
			for i := w; ; i = (i + xdsChurn) % xdsKeys {
				select {
				case <-c.done:
					return
				default:
				}
				c.send(i)
			}
		})
	}
	return c
}

func (c *churn) send(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), xdsConverge)
	defer cancel()
	backoff := 5 * time.Millisecond
	c.rpcs.Add(1)
	for {
		a, err := ask(ctx, c.x.cc, c.x.keys[i])
		if err == nil {
			c.mu.Lock()
			c.answers = append(c.answers, keyAnswer{i, a})
			c.mu.Unlock()
			return
		}
		if (!ownerguard.IsMisdirected(err) && status.Code(err) != codes.Unavailable) || ctx.Err() != nil {
			c.mu.Lock()
			c.errs = append(c.errs, fmt.Errorf("key %q: %w", c.x.keys[i], err))
			c.mu.Unlock()
			return
		}
		if ownerguard.IsMisdirected(err) {
			c.sawRefusal.Add(1)
		} else {
			c.sawGone.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// stop ends the churn and checks that every answer came from an owner the
// manager's table named for the key, under the generation it named.
func (c *churn) stop(t *testing.T, g *grantLog) churnStats {
	t.Helper()
	close(c.done)
	c.wg.Wait()
	st := churnStats{rpcs: int(c.rpcs.Load()), refused: int(c.x.refused() - c.refused0),
		sawRefusal: int(c.sawRefusal.Load() + c.x.probeRefusals.Load() - c.probes0), sawGone: int(c.sawGone.Load())}
	for _, ka := range c.answers {
		if !g.wasGranted(ka.key, ka.a) {
			st.bad++
			if st.bad <= 5 {
				t.Errorf("key %q answered by %s under generation %d, which the manager never granted it", c.x.keys[ka.key], ka.a.owner, ka.a.gen)
			}
		}
	}
	if st.bad > 0 {
		t.Errorf("%d of %d answers during the change came from a server without the key's lease", st.bad, len(c.answers))
	}
	for i, err := range c.errs {
		if i < 5 {
			t.Errorf("during the change: %v", err)
		}
	}
	if len(c.answers) == 0 {
		t.Errorf("no RPC was answered during the change")
	}
	return st
}
