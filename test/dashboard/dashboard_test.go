// Package dashboard tests the operator's dashboard (controllers/dashboard)
// end to end: a real kube-apiserver and etcd (envtest) hold a CachePool,
// CachedVolumes and Events with known figures; a controller-runtime
// manager that is not the leader serves the dashboard on its metrics
// port; Debian's headless Chromium loads the page, runs its script, and
// the test reads the rendered DOM and keeps a screenshot.
package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dashboard"
	"github.com/rackcache/rackcache/test/framework"
)

const (
	// samplePeriod is short so that the history fills within a second.
	samplePeriod = 200 * time.Millisecond
	// historySize is small so that the history is full, and its length
	// therefore fixed, by the time Chromium reads it.
	historySize = 6
	// stateTimeout bounds the wait for the dashboard's first full state.
	stateTimeout = 60 * time.Second
	// leaseName is the Lease another replica holds.
	leaseName = "rackcache-dashboard-test"
)

func TestDashboardInChromium(t *testing.T) {
	chromium := chromiumBinary(t)
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	_, cfg := framework.StartEnvtest(t, filepath.Join(framework.RepoRoot(), "config", "crd", "bases"))
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(rcv1.AddToScheme(scheme))
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t0 := time.Now().UTC().Truncate(time.Second).Add(-10 * time.Minute)
	createPool(ctx, t, k8s)
	createVolumes(ctx, t, k8s)
	createEvents(ctx, t, k8s, t0)
	holdLease(ctx, t, k8s, leaseName)

	port := framework.FreeLoopbackPort(t)
	mgr := startManager(t, cfg, scheme, port)
	base := fmt.Sprintf("http://127.0.0.1:%d%s", port, dashboard.Path)
	state := waitForState(ctx, t, base+"api/state")

	var pool rcv1.CachePool
	if err := k8s.Get(ctx, client.ObjectKey{Name: poolName}, &pool); err != nil {
		t.Fatalf("get CachePool: %v", err)
	}
	volumes := map[string]*rcv1.CachedVolume{}
	for _, name := range []string{volWB, volWT} {
		v := &rcv1.CachedVolume{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, v); err != nil {
			t.Fatalf("get CachedVolume %s: %v", name, err)
		}
		volumes[name] = v
	}
	checkStateMatchesObjects(t, state, &pool, volumes)

	start := time.Now()
	page := parseDOM(t, runChromium(t, chromium, "--dump-dom", base))
	t.Logf("chromium rendered the page in %v", time.Since(start).Round(time.Millisecond))
	checkPools(page, &pool)
	checkServers(page)
	checkVolumes(page, volumes)
	checkEvents(page, t0)
	checkCharts(page)
	checkNoInjectedMarkup(page)

	screenshot(t, chromium, base)

	select {
	case <-mgr.Elected():
		t.Error("the manager became the leader; the test meant to show a follower serving the dashboard")
	default:
	}
}

// startManager runs a manager that cannot become the leader (holdLease)
// with the dashboard on port, as cmd/operator wires it.
func startManager(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, port int) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionID:        leaseName,
		LeaderElectionNamespace: "default",
	})
	if err != nil {
		t.Fatalf("create manager: %v", err)
	}
	if _, err := dashboard.Setup(mgr, dashboard.Options{SamplePeriod: samplePeriod, HistorySize: historySize}, fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Fatalf("set up the dashboard: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop within 30 s")
		}
	})
	return mgr
}

// waitForState polls the state until the history is full and the Events
// and volume statistics are in: from then on the page's figures are fixed.
func waitForState(ctx context.Context, t *testing.T, url string) dashboard.State {
	t.Helper()
	deadline := time.Now().Add(stateTimeout)
	var last string
	for {
		s, err := getState(ctx, url)
		if err == nil && len(s.History) == historySize && len(s.Events) == len(wantEvents(time.Time{})) && len(s.Volumes) == 2 {
			return s
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d samples, %d events (%q), %d volumes", len(s.History), len(s.Events), s.EventsError, len(s.Volumes))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard's state was not complete within %v: %s", stateTimeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getState(ctx context.Context, url string) (dashboard.State, error) {
	var s dashboard.State
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// checkStateMatchesObjects compares the JSON the page polls with the
// objects as the apiserver returns them.
func checkStateMatchesObjects(t *testing.T, s dashboard.State, pool *rcv1.CachePool, volumes map[string]*rcv1.CachedVolume) {
	t.Helper()
	if len(s.Pools) != 1 || s.Pools[0].Name != pool.Name || s.Pools[0].CapacityBytes != pool.Status.Capacity.Value() ||
		s.Pools[0].AllocatedBytes != pool.Status.Allocated.Value() || len(s.Pools[0].Servers) != len(pool.Status.Servers) {
		t.Errorf("state pools = %+v, want %s as in its status", s.Pools, pool.Name)
	}
	for _, v := range s.Volumes {
		obj := volumes[v.Name]
		if obj == nil {
			t.Errorf("state has volume %s, which the test did not create", v.Name)
			continue
		}
		st := obj.Status.Stats
		var dirty int64
		if st.Dirty != nil {
			dirty = st.Dirty.Value()
		}
		if v.HitRatio != st.HitRatio || v.ReadBytes != st.ReadBytes || v.WrittenBytes != st.WrittenBytes || v.DirtyBytes != dirty {
			t.Errorf("state volume %+v, want the stats of its status %+v", v, st)
		}
		// Every sample carries the (unchanging) statistics.
		for i, h := range s.History {
			got, ok := h.Volumes[v.Name]
			want, _ := strconv.ParseFloat(strings.TrimSuffix(st.HitRatio, "%"), 64)
			if !ok || got.HitRatio == nil || *got.HitRatio != want || got.ReadBytes != st.ReadBytes || got.DirtyBytes != dirty {
				t.Errorf("sample %d of %s = %+v, want hit ratio %v, read %d, dirty %d", i, v.Name, got, want, st.ReadBytes, dirty)
			}
		}
	}
	for i := 1; i < len(s.History); i++ {
		if !s.History[i].Time.After(s.History[i-1].Time) {
			t.Errorf("sample %d at %v is not after sample %d at %v", i, s.History[i].Time, i-1, s.History[i-1].Time)
		}
	}
}

func checkPools(d *dom, pool *rcv1.CachePool) {
	d.t.Helper()
	table := d.one(d.root, "table#pools", has("table", "id", "pools"))
	row := d.one(table, "pool row", has("tr", "data-pool", poolName))
	what := "pool " + poolName
	d.cell(row, what, "name", poolName, "")
	d.cell(row, what, "ready", "True", "")
	d.cell(row, what, "servers", "1 / 2", "")
	d.cell(row, what, "capacity", poolCapacity.text, strconv.FormatInt(pool.Status.Capacity.Value(), 10))
	d.cell(row, what, "allocated", poolAllocated.text, strconv.FormatInt(pool.Status.Allocated.Value(), 10))
	d.cell(row, what, "volumes", "2", "2")
	d.cell(row, what, "reason", rcv1.ReasonAsExpected, "")
}

func checkServers(d *dom) {
	d.t.Helper()
	table := d.one(d.root, "table#servers", has("table", "id", "servers"))
	if rows := all(table, has("tr", "data-pool", poolName)); len(rows) != 2 {
		d.t.Errorf("%d server rows, want 2", len(rows))
	}
	for _, s := range []struct {
		node, rack, address, ready string
		capacity, allocated        figure
		devices                    map[string]string
	}{
		{"node-a", "rack-1", "10.0.0.11", "True", serverACap, serverAAlloc, map[string]string{
			// vol-wb's 3 GiB cache is on node-a's cache0.
			"cache0": "cache0: 3.00 GiB / 4.00 GiB, 1.00 GiB free",
			"cache1": "cache1: 0 B / 4.00 GiB, 4.00 GiB free",
		}},
		{"node-b", "rack-2", "10.0.0.12", "False", serverBCap, serverBAlloc, map[string]string{
			"cache0": "cache0: 1.00 GiB / 4.00 GiB, 3.00 GiB free",
		}},
	} {
		row := d.one(table, "server row "+s.node, has("tr", "data-pool", poolName, "data-server", s.node))
		what := "server " + s.node
		d.cell(row, what, "node", s.node, "")
		d.cell(row, what, "rack", s.rack, "")
		d.cell(row, what, "address", s.address, "")
		d.cell(row, what, "ready", s.ready, "")
		d.cell(row, what, "capacity", s.capacity.text, strconv.FormatInt(s.capacity.bytes, 10))
		d.cell(row, what, "allocated", s.allocated.text, strconv.FormatInt(s.allocated.bytes, 10))
		items := all(row, has("li"))
		if len(items) != len(s.devices) {
			d.t.Errorf("%s: %d devices, want %d", what, len(items), len(s.devices))
		}
		for _, li := range items {
			name, _ := attr(li, "data-device")
			if want, ok := s.devices[name]; !ok || text(li) != want {
				d.t.Errorf("%s device %q shows %q, want %q", what, name, text(li), want)
			}
		}
	}
}

func checkVolumes(d *dom, volumes map[string]*rcv1.CachedVolume) {
	d.t.Helper()
	table := d.one(d.root, "table#volumes", has("table", "id", "volumes"))
	for _, v := range []struct {
		name, server, phase, mode, ready string
		dirty, read, written             figure
	}{
		{volWB, "node-a", "Ready", "WriteBack", "True", wbDirty, wbRead, wbWritten},
		{volWT, "node-b", "Degraded", "WriteThrough", "False", wtDirty, wtRead, wtWritten},
	} {
		obj := volumes[v.name]
		row := d.one(table, "volume row "+v.name, has("tr", "data-volume", v.name))
		what := "volume " + v.name
		d.cell(row, what, "name", v.name, "")
		d.cell(row, what, "pool", poolName, "")
		d.cell(row, what, "server", v.server, "")
		d.cell(row, what, "phase", v.phase, "")
		d.cell(row, what, "writeMode", v.mode, "")
		d.cell(row, what, "ready", v.ready, "")
		// The hit ratio is shown as the status has it.
		d.cell(row, what, "hitRatio", obj.Status.Stats.HitRatio, "")
		var dirty int64
		if obj.Status.Stats.Dirty != nil {
			dirty = obj.Status.Stats.Dirty.Value()
		}
		d.cell(row, what, "dirty", v.dirty.text, strconv.FormatInt(dirty, 10))
		d.cell(row, what, "read", v.read.text, strconv.FormatInt(obj.Status.Stats.ReadBytes, 10))
		d.cell(row, what, "written", v.written.text, strconv.FormatInt(obj.Status.Stats.WrittenBytes, 10))
	}
}

func checkEvents(d *dom, t0 time.Time) {
	d.t.Helper()
	table := d.one(d.root, "table#events", has("table", "id", "events"))
	rows := all(table, func(n *html.Node) bool { _, ok := attr(n, "data-event"); return has("tr")(n) && ok })
	want := wantEvents(t0)
	if len(rows) != len(want) {
		d.t.Fatalf("%d event rows, want %d (the Pod's Event left out)", len(rows), len(want))
	}
	for i, e := range want {
		what := fmt.Sprintf("event %d", i)
		d.cell(rows[i], what, "time", e.at.Format("2006-01-02 15:04:05")+" UTC", e.at.Format(time.RFC3339))
		d.cell(rows[i], what, "type", e.typ, "")
		d.cell(rows[i], what, "object", e.kind+"/"+e.name, "")
		d.cell(rows[i], what, "reason", e.reason, "")
		d.cell(rows[i], what, "message", e.message, "")
		d.cell(rows[i], what, "count", strconv.Itoa(int(e.count)), strconv.Itoa(int(e.count)))
	}
}

// checkCharts checks that each chart has one line per series with a point
// per sample, left to right in time, at the height of its (constant)
// value: the hit ratio of vol-wb (93.5%) above that of vol-wt (41.2%).
func checkCharts(d *dom) {
	d.t.Helper()
	status := d.one(d.root, "#status", has("", "id", "status"))
	if got, _ := attr(status, "data-samples"); got != strconv.Itoa(historySize) {
		d.t.Errorf("the status line counts %q samples, want %d", got, historySize)
	}
	heights := map[string]float64{}
	for chart, series := range map[string][]string{
		"hit-ratio": {volWB, volWT},
		"io":        {"read", "written"},
		"dirty":     {"dirty"},
	} {
		svg := d.one(d.root, "chart "+chart, has("svg", "data-chart", chart))
		if got, _ := attr(svg, "data-samples"); got != strconv.Itoa(historySize) {
			d.t.Errorf("chart %s: data-samples %q, want %d", chart, got, historySize)
		}
		lines := all(svg, has("polyline"))
		if len(lines) != len(series) {
			d.t.Errorf("chart %s: %d lines, want %d", chart, len(lines), len(series))
		}
		for _, name := range series {
			line := d.one(svg, "chart "+chart+" line "+name, has("polyline", "data-series", name))
			pts := parsePoints(d.t, line)
			if len(pts) != historySize {
				d.t.Errorf("chart %s line %s: %d points, want one per sample (%d)", chart, name, len(pts), historySize)
				continue
			}
			for i := 1; i < len(pts); i++ {
				if pts[i].X <= pts[i-1].X || pts[i].Y != pts[0].Y {
					d.t.Errorf("chart %s line %s: points %v, want x increasing at a constant height", chart, name, pts)
					break
				}
			}
			heights[chart+"/"+name] = pts[0].Y
		}
	}
	if heights["hit-ratio/"+volWB] >= heights["hit-ratio/"+volWT] {
		d.t.Errorf("hit ratio line of %s (93.5%%) at y=%v is not above that of %s (41.2%%) at y=%v",
			volWB, heights["hit-ratio/"+volWB], volWT, heights["hit-ratio/"+volWT])
	}
	// Read (3.5 GiB + 117.74 MiB) is above written (1.5 GiB + 512 B).
	if heights["io/read"] >= heights["io/written"] {
		d.t.Errorf("read line at y=%v is not above the written line at y=%v", heights["io/read"], heights["io/written"])
	}
}

type point struct{ X, Y float64 }

func parsePoints(t *testing.T, n *html.Node) []point {
	t.Helper()
	raw, _ := attr(n, "points")
	var out []point
	for _, p := range strings.Fields(raw) {
		var pt point
		if _, err := fmt.Sscanf(p, "%g,%g", &pt.X, &pt.Y); err != nil {
			t.Errorf("polyline point %q: %v", p, err)
			continue
		}
		out = append(out, pt)
	}
	if want, _ := attr(n, "data-points"); want != strconv.Itoa(len(out)) {
		t.Errorf("polyline data-points %q, but %d points", want, len(out))
	}
	return out
}

// checkNoInjectedMarkup: the Event message with markup in it is text; the
// only script is the page's own and no image was created.
func checkNoInjectedMarkup(d *dom) {
	d.t.Helper()
	scripts := all(d.root, has("script"))
	if len(scripts) != 1 {
		d.t.Errorf("%d script elements, want only the page's own", len(scripts))
	} else if src, _ := attr(scripts[0], "src"); src != "dashboard.js" {
		d.t.Errorf("script src %q, want dashboard.js", src)
	}
	if imgs := all(d.root, has("img")); len(imgs) != 0 {
		d.t.Errorf("%d img elements: an Event message was rendered as markup", len(imgs))
	}
	if title := text(d.one(d.root, "title", has("title"))); title != "rackcache" {
		d.t.Errorf("document title %q, want rackcache", title)
	}
}

// screenshot keeps a picture of the page in _output/dashboard (for a
// reviewer, and as a CI artifact) and checks that it is a real one: a PNG
// of the window's size with more on it than a blank page.
func screenshot(t *testing.T, chromium, url string) {
	t.Helper()
	dir := filepath.Join(framework.RepoRoot(), "_output", "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create %s: %v", dir, err)
	}
	path := filepath.Join(dir, "dashboard.png")
	// A picture from an earlier run must not pass for this one.
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatalf("remove the old screenshot: %v", err)
	}
	runChromium(t, chromium, "--screenshot="+path, "--window-size=1280,1000", "--hide-scrollbars", url)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s is not a PNG", path)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if got := img.Bounds().Size(); got != image.Pt(1280, 1000) {
		t.Errorf("screenshot is %v, want 1280x1000", got)
	}
	if n := distinctColors(img, 64); n < 16 {
		t.Errorf("screenshot has %d distinct colours: the page did not render", n)
	}
	t.Logf("screenshot (%d bytes): %s", len(b), path)
}

// distinctColors counts colours in img, stopping at limit.
func distinctColors(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 3 {
		for x := r.Min.X; x < r.Max.X; x += 3 {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			seen[[4]uint32{cr, cg, cb, ca}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}
