package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRateLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--insecure", "--ratelimit"}, "--ratelimit-name"},
		{[]string{"--insecure", "--ratelimit", "--ratelimit-name", "p1", "--gossip-loss", "1.5"}, "--gossip-loss"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), tc.args, envFunc(nil), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, %q; want 2 naming %s", tc.args, code, errOut.String(), tc.want)
		}
	}
	s, err := load([]string{"--insecure", "--ratelimit", "--ratelimit-name", "p1", "--gossip-fanout", "3"}, envFunc(map[string]string{"FUGE_PROXY_GOSSIP_EPOCH": "250ms"}))
	if err != nil || !s.rateLimits || s.rateLimit.Name != "p1" || s.rateLimit.Fanout != 3 || s.rateLimit.Epoch.String() != "250ms" || s.rateLimit.GossipAddr != "127.0.0.1:0" {
		t.Fatalf("load: %+v %v", s.rateLimit, err)
	}
}
