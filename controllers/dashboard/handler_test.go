package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// fakeDashboard serves objs through the fake client (Events filtered by
// kind as the apiserver would) on a clock that advances a second per read.
func fakeDashboard(t *testing.T, o Options, objs ...client.Object) *Dashboard {
	t.Helper()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(rcv1.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Event{}, "involvedObject.kind", func(o client.Object) []string {
			return []string{o.(*corev1.Event).InvolvedObject.Kind}
		}).Build()
	d := New(c, c, o)
	clock := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	d.now = func() time.Time {
		clock = clock.Add(time.Second)
		return clock
	}
	return d
}

func TestOnlyGetAndHeadAreServed(t *testing.T) {
	d := fakeDashboard(t, Options{})
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		for _, path := range []string{Path, Path + "api/state"} {
			rec := httptest.NewRecorder()
			d.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader("{}")))
			if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d Allow %q, want 405 Allow \"GET, HEAD\"", method, path, rec.Code, rec.Header().Get("Allow"))
			}
		}
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(method, Path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("%s %s: %d, want 200", method, Path, rec.Code)
		}
	}
}

func TestPagesAndHeaders(t *testing.T) {
	d := fakeDashboard(t, Options{})
	for _, tc := range []struct {
		path        string
		status      int
		contentType string
	}{
		{Path, http.StatusOK, "text/html; charset=utf-8"},
		{Path + "index.html", http.StatusOK, "text/html; charset=utf-8"},
		{Path + "dashboard.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{Path + "dashboard.css", http.StatusOK, "text/css; charset=utf-8"},
		{Path + "api/state", http.StatusOK, "application/json"},
		{Path + "assets/index.html", http.StatusNotFound, ""},
		{Path + "../metrics", http.StatusNotFound, ""},
		{"/metrics", http.StatusNotFound, ""},
	} {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.status {
			t.Errorf("GET %s: %d, want %d", tc.path, rec.Code, tc.status)
			continue
		}
		h := rec.Header()
		if tc.contentType != "" && h.Get("Content-Type") != tc.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, h.Get("Content-Type"), tc.contentType)
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", tc.path, h.Get("X-Content-Type-Options"))
		}
	}
}

// The page must load nothing from elsewhere: every src and href in the
// HTML is a file of ours, the style has no url() or @import, and the
// script fetches only the state.
func TestAssetsAreSelfContained(t *testing.T) {
	refs := regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(string(assetByName["index.html"].body), -1)
	if len(refs) != 2 {
		t.Errorf("index.html references %v, want the script and the style", refs)
	}
	for _, m := range refs {
		if _, ok := assetByName[m[1]]; !ok {
			t.Errorf("index.html references %q, which the handler does not serve", m[1])
		}
	}
	css := strings.ToLower(string(assetByName["dashboard.css"].body))
	if strings.Contains(css, "url(") || strings.Contains(css, "@import") {
		t.Error("dashboard.css loads something (url() or @import)")
	}
	js := string(assetByName["dashboard.js"].body)
	if fetches := regexp.MustCompile(`fetch\(([^,)]*)`).FindAllStringSubmatch(js, -1); len(fetches) != 1 || fetches[0][1] != "'api/state'" {
		t.Errorf("dashboard.js fetches %v, want only 'api/state'", fetches)
	}
	for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(js, banned) {
			t.Errorf("dashboard.js uses %s: object data must reach the DOM as text only", banned)
		}
	}
}

func TestStateCarriesObjectsHistoryAndEvents(t *testing.T) {
	pool := &rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: "fast"}}
	vol := cachedVolume("vol-a", "fast", "80.0%", "2Ki", 100, 200)
	ev := event("e1", "rackcache.io/v1alpha1", "CachedVolume", "vol-a", "Placed", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	pod := event("e2", "v1", "Pod", "x", "Pulled", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	d := fakeDashboard(t, Options{HistorySize: 2}, pool, &vol, &ev, &pod)

	for range 3 {
		d.sampleOnce(context.Background(), logr.Discard())
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+"api/state", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("GET api/state: %d %q: %s", rec.Code, rec.Header().Get("Cache-Control"), body)
	}
	var s State
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("decode state: %v", err)
	}
	if len(s.Pools) != 1 || s.Pools[0].Name != "fast" || len(s.Volumes) != 1 || s.Volumes[0].HitRatio != "80.0%" {
		t.Errorf("objects = %+v %+v", s.Pools, s.Volumes)
	}
	// Three samples into a history of two: the first is gone; the clock
	// ticked once per sample.
	if len(s.History) != 2 || !s.History[0].Time.Equal(time.Date(2025, 6, 1, 0, 0, 2, 0, time.UTC)) ||
		!s.History[1].Time.Equal(time.Date(2025, 6, 1, 0, 0, 3, 0, time.UTC)) {
		t.Fatalf("history = %+v, want the samples at 00:00:02 and 00:00:03", s.History)
	}
	got := s.History[1].Volumes["vol-a"]
	if got.HitRatio == nil || *got.HitRatio != 80 || got.DirtyBytes != 2048 || got.ReadBytes != 100 || got.WrittenBytes != 200 {
		t.Errorf("sampled vol-a = %+v", got)
	}
	if len(s.Events) != 1 || s.Events[0].Reason != "Placed" || s.Events[0].Name != "vol-a" || s.EventsError != "" {
		t.Errorf("events = %+v (error %q), want only the CachedVolume's", s.Events, s.EventsError)
	}
}

// A failing Events list leaves the page working and says why.
func TestEventsErrorIsShownNotFatal(t *testing.T) {
	d := fakeDashboard(t, Options{})
	d.events = failingReader{}
	d.sampleOnce(context.Background(), logr.Discard())
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+"api/state", nil))
	var s State
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("decode state: %v", err)
	}
	if rec.Code != http.StatusOK || !strings.Contains(s.EventsError, "forbidden") || len(s.History) != 1 {
		t.Errorf("status %d, events error %q, %d samples; want 200, the error, 1 sample", rec.Code, s.EventsError, len(s.History))
	}
}

// failingReader answers every List as an apiserver without the RBAC rule would.
type failingReader struct{ client.Reader }

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New("no RBAC rule"))
}

func TestStartSamplesUntilCancelled(t *testing.T) {
	d := fakeDashboard(t, Options{SamplePeriod: 5 * time.Millisecond, HistorySize: 100})
	if d.NeedLeaderElection() {
		t.Error("NeedLeaderElection() = true; every replica must sample")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, _, _ := d.snapshot()
		if len(h) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d samples after 10 s at a 5 ms period", len(h))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v, want nil on cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
}
