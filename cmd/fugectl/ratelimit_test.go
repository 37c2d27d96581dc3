package main

import (
	"strings"
	"testing"
)

func TestRateLimitsAgainstManager(t *testing.T) {
	addr := startManager(t, insecure)
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return fugectl(t, insecure, append([]string{"--manager", addr}, args...)...)
	}
	code, out, errOut := run("ratelimits", "set", "default", "tenant-api", "--header", "X-Tenant", "--requests", "1000",
		"--period", "30s", "--burst", "200", "--route-prefix", "/api/", "--override", "acme=5000", "--mode", "shadow")
	if code != exitOK || !strings.Contains(collapse(out), "tenant-api /api/ X-Tenant 1000/30s 200 acme=5000 shadow panic_share 10000") {
		t.Fatalf("set: %d %q %q", code, out, errOut)
	}
	// A limit the manager refuses changes nothing, and the error names the field.
	code, _, errOut = run("ratelimits", "set", "default", "other", "--header", "X-Tenant", "--requests", "10", "--on-no-view", "open")
	if code != exitError || !strings.Contains(errOut, "on_no_view") {
		t.Fatalf("bad on-no-view: %d %q", code, errOut)
	}
	code, _, errOut = run("ratelimits", "set", "default", "other", "--header", "X-Tenant")
	if code != exitUsage || !strings.Contains(errOut, "--requests") {
		t.Fatalf("no requests: %d %q", code, errOut)
	}
	code, out, _ = run("ratelimits", "default")
	if code != exitOK || strings.Contains(out, "other") || !strings.Contains(out, "tenant-api") {
		t.Fatalf("list after refusals: %d %q", code, out)
	}
	if code, _, errOut := run("ratelimits", "delete", "default", "tenant-api"); code != exitOK {
		t.Fatalf("delete: %d %q", code, errOut)
	}
	if code, _, errOut := run("ratelimits", "delete", "default", "tenant-api"); code != exitError || !strings.Contains(errOut, "no limit") {
		t.Fatalf("delete again: %d %q", code, errOut)
	}
}
