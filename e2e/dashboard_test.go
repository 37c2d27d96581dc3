package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/ownerguard"
)

// screenshotEnv, when set, names a file the dashboard test also writes its
// main screenshot to (docs/dashboard.png is made so). The screenshots are
// always saved in the test's artifact directory: go test -artifacts keeps
// them under -outputdir.
const screenshotEnv = "FUGE_DASHBOARD_SCREENSHOT"

// findChromium returns Debian's chromium, from PATH or /usr/bin, or fails
// the test saying how to install it (scripts/test.sh does).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("the dashboard test needs Chromium and found none on PATH or at /usr/bin/chromium: " +
		"install Debian's package (apt-get update && apt-get install -y chromium), as scripts/test.sh does")
	return ""
}

// chromiumStartTimeout bounds Chromium's start, which on a loaded machine
// with a cold disk cache takes far longer than anything the test waits for.
const chromiumStartTimeout = 2 * time.Minute

// browser starts a headless Chromium with a new, empty profile and returns
// a context for driving one tab; it is closed at cleanup.
func browser(t *testing.T) context.Context {
	t.Helper()
	// Not t.TempDir: Chromium's children may still write to the profile
	// just after it stops, and the removal has to be retried.
	profile, err := os.MkdirTemp("", "fuge-dashboard-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(findChromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1500),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf), chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // between removal attempts
		}
		t.Logf("could not remove Chromium's profile %s", profile)
	})
	// Start the browser now, on the context without a timeout (its life
	// is that context's); a Chromium that cannot start fails here.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting Chromium: %v", err)
		}
	case <-time.After(chromiumStartTimeout):
		t.Fatalf("Chromium did not start within %v", chromiumStartTimeout)
	}
	// The page's console (errors, exceptions) and what it shows, for a
	// failing run.
	var (
		mu      sync.Mutex
		console []string
	)
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			mu.Lock()
			console = append(console, m.String())
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		mu.Lock()
		for _, m := range console {
			t.Logf("console: %s", m)
		}
		mu.Unlock()
		var state any
		if err := evalJSON(ctx, `JSON.stringify([document.querySelector("#stream").textContent, document.querySelector("#banner").textContent,
			window.fuge ? window.fuge.seq() : -1, [...document.querySelectorAll("#log li")].slice(0, 40).map(li => li.textContent)])`, &state); err == nil {
			t.Logf("the page: %v", state)
		}
	})
	return ctx
}

// run runs browser actions under the default timeout.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, fugetest.DefaultTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that yields a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, fugetest.DefaultTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// evalJSON evaluates a JavaScript expression that yields a JSON string and
// decodes it into v.
func evalJSON(ctx context.Context, expr string, v any) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(cctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), v)
}

// pageArc is an arc as the page holds, draws or lists it.
type pageArc struct {
	Start, End string
	Owner      string
	Generation uint64
	State      string
}

// merged joins adjacent arcs whose owner, generation and state agree
// (across zero too), as the page keeps them; ignoreGen joins by owner and
// state alone, as the page draws them.
func merged(arcs []pageArc, ignoreGen bool) []pageArc {
	var out []pageArc
	same := func(a, b pageArc) bool {
		return a.Owner == b.Owner && a.State == b.State && (ignoreGen || a.Generation == b.Generation)
	}
	for _, a := range arcs {
		if ignoreGen {
			a.Generation = 0
		}
		if k := len(out) - 1; k >= 0 && same(out[k], a) {
			out[k].End = a.End
			continue
		}
		out = append(out, a)
	}
	if k := len(out) - 1; k > 0 && same(out[k], out[0]) {
		out[0].Start = out[k].Start
		out = out[:k]
	}
	if len(out) == 1 {
		out[0].Start = out[0].End // the whole circle
	}
	return out
}

// adminArcs reads the lease table from the admin API as pageArcs.
func adminArcs(m *fugetest.Manager) ([]pageArc, error) {
	arcs, err := m.Arcs()
	if err != nil {
		return nil, err
	}
	out := make([]pageArc, len(arcs))
	for i, a := range arcs {
		out[i] = pageArc{Start: a.Start, End: a.End, Owner: a.Owner, Generation: a.Generation, State: a.State}
	}
	return out, nil
}

// settle waits until every arc is granted to one of owners and each holds
// some.
func settle(t *testing.T, m *fugetest.Manager, owners ...string) {
	t.Helper()
	fugetest.Eventually(t, fmt.Sprintf("every arc granted to %v", owners), func() bool {
		arcs, err := adminArcs(m)
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, a := range arcs {
			if a.State != "granted" || !slices.Contains(owners, a.Owner) {
				return false
			}
			seen[a.Owner] = true
		}
		return len(seen) == len(owners)
	})
}

// pageMatchesAdmin waits until the page's table, its rendered rows and the
// circle it drew all agree with the admin API's lease table, and returns
// the owners drawn.
func pageMatchesAdmin(t *testing.T, ctx context.Context, m *fugetest.Manager) []string {
	t.Helper()
	var last string
	deadline := time.Now().Add(fugetest.DefaultTimeout)
	for {
		want, err := adminArcs(m)
		if err == nil {
			mismatch, owners := compareWithPage(ctx, m.NS, want)
			if mismatch == "" {
				return owners
			}
			last = mismatch
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard does not show the admin API's lease table: %s", last)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// compareWithPage says how the page differs from want ("" if it does not),
// and which owners its circle shows.
func compareWithPage(ctx context.Context, ns string, want []pageArc) (string, []string) {
	var held, drawn, rows []pageArc
	if err := evalJSON(ctx, fmt.Sprintf(`JSON.stringify(window.fuge ? window.fuge.arcs(%q) : [])`, ns), &held); err != nil {
		return "page table: " + err.Error(), nil
	}
	if err := evalJSON(ctx, fmt.Sprintf(`JSON.stringify(window.fuge ? window.fuge.drawn(%q) : [])`, ns), &drawn); err != nil {
		return "page circle: " + err.Error(), nil
	}
	rowsJS := fmt.Sprintf(`JSON.stringify([...document.querySelectorAll('#ns-%s table.arcs tbody tr')].map(tr => ({
		start: tr.dataset.start, end: tr.dataset.end, owner: tr.dataset.owner, generation: +tr.dataset.gen, state: tr.dataset.state})))`, ns)
	if err := evalJSON(ctx, rowsJS, &rows); err != nil {
		return "page rows: " + err.Error(), nil
	}
	w := merged(want, false)
	if !slices.Equal(merged(held, false), w) {
		return fmt.Sprintf("the page holds %d arcs %v, the admin API %d %v", len(held), held, len(w), w), nil
	}
	if !slices.Equal(merged(rows, false), w) {
		return fmt.Sprintf("the page lists %d rows, the admin API has %d arcs", len(rows), len(w)), nil
	}
	wd := merged(want, true)
	if !slices.Equal(drawn, wd) {
		return fmt.Sprintf("the circle shows %v, the admin API %v", drawn, wd), nil
	}
	var owners []string
	for _, a := range drawn {
		if a.Owner != "" && !slices.Contains(owners, a.Owner) {
			owners = append(owners, a.Owner)
		}
	}
	slices.Sort(owners)
	return "", owners
}

// waitLog waits until the page's event log has an entry of kind about owner.
func waitLog(t *testing.T, ctx context.Context, kind, owner string) {
	t.Helper()
	sel := fmt.Sprintf(`#log li[data-kind=%q][data-owner=%q]`, kind, owner)
	run(t, ctx, "waiting for a "+kind+" event about "+owner+" in the log", chromedp.WaitVisible(chromedp.CSS(sel)))
}

func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png := get(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	p := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
	return p
}

// TestDashboard opens the manager's dashboard in headless Chromium and
// checks it against the admin API: the ring it draws and the lease table
// it lists are the manager's, the owners and the raft cluster are shown,
// an owner that crashes appears in the event log (its expiry) and leaves
// the circle, and the drain and namespace forms work.
func TestDashboard(t *testing.T) {
	ctx := browser(t)
	m := fugetest.StartManager(t, fugetest.Options{RingSize: 64, T: 2 * time.Second})
	owners := []string{"alpha", "bravo", "charlie"}
	held := map[string]*ownerguard.Owner{}
	for i, name := range owners {
		held[name] = m.Owner(t, name, fmt.Sprintf("127.0.0.1:%d", 17101+i), nil)
	}
	settle(t, m, owners...)

	run(t, ctx, "opening the dashboard", chromedp.Navigate(m.AdminURL("/ui/")),
		chromedp.WaitVisible(chromedp.CSS(`#ns-ns canvas.ring`)))
	if got := pageMatchesAdmin(t, ctx, m); !slices.Equal(got, owners) {
		t.Fatalf("the circle shows owners %v, want %v", got, owners)
	}
	// The owners table lists the admin API's owners, with their load not
	// yet known.
	var ownerRows []string
	if err := evalJSON(ctx, `JSON.stringify([...document.querySelectorAll('#ns-ns table.owners tbody tr')].map(tr => tr.dataset.owner + " " + tr.cells[4].textContent))`, &ownerRows); err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha —", "bravo —", "charlie —"}; !slices.Equal(ownerRows, want) {
		t.Errorf("owner rows %q, want %q", ownerRows, want)
	}
	run(t, ctx, "waiting for the cluster", chromedp.WaitVisible(chromedp.CSS(`#cluster tr[data-node="m1"]`)))
	cluster := get(t, ctx, "reading the cluster", chromedp.Text(chromedp.CSS(`#cluster-summary`)))
	if !strings.Contains(cluster, "leader m1") {
		t.Errorf("cluster summary %q does not name m1 as the leader", cluster)
	}
	for _, name := range owners {
		waitLog(t, ctx, "join", name)
		waitLog(t, ctx, "grant", name)
	}
	shot := screenshot(t, ctx, "dashboard.png")
	if dst := os.Getenv(screenshotEnv); dst != "" {
		b, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(dst, b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// bravo crashes: its arcs expire after the hold, the log says so, and
	// the circle loses it.
	if err := held["bravo"].Abandon(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, ctx, "expiry", "bravo")
	waitLog(t, ctx, "loss", "bravo")
	settle(t, m, "alpha", "charlie")
	if got := pageMatchesAdmin(t, ctx, m); !slices.Equal(got, []string{"alpha", "charlie"}) {
		t.Fatalf("after bravo crashed the circle shows owners %v, want [alpha charlie]", got)
	}
	screenshot(t, ctx, "dashboard-after-crash.png")

	// Drain charlie from the page: its arcs are recalled and go to alpha.
	run(t, ctx, "draining charlie", chromedp.Click(chromedp.CSS(`#ns-ns table.owners tr[data-owner="charlie"] button`)))
	waitLog(t, ctx, "drain", "charlie")
	waitLog(t, ctx, "recall", "charlie")
	settle(t, m, "alpha")
	if got := pageMatchesAdmin(t, ctx, m); !slices.Equal(got, []string{"alpha"}) {
		t.Fatalf("after draining charlie the circle shows owners %v, want [alpha]", got)
	}

	// Create a namespace from the page.
	run(t, ctx, "creating a namespace",
		chromedp.SendKeys(chromedp.CSS(`#create-ns input[name="name"]`), "web"),
		chromedp.SetValue(chromedp.CSS(`#create-ns input[name="ring_size"]`), "128"),
		chromedp.Click(chromedp.CSS(`#create-ns button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#ns-web canvas.ring`)),
		chromedp.WaitVisible(chromedp.CSS(`#log li[data-kind="create"][data-namespace="web"]`)))
	resp, err := http.Get(m.AdminURL("/v1/namespaces"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var nss struct{ Namespaces []struct{ Name string } }
	if err := json.NewDecoder(resp.Body).Decode(&nss); err != nil {
		t.Fatal(err)
	}
	if len(nss.Namespaces) != 2 || nss.Namespaces[1].Name != "web" {
		t.Errorf("namespaces after the form: %+v, want ns and web", nss.Namespaces)
	}
	screenshot(t, ctx, "dashboard-after-drain.png")
}
