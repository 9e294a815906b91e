package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// contentSecurityPolicy lets the page load only its own script, style and
// state from this server: no inline script, nothing from elsewhere, and no
// framing. Object data reaches the DOM only as text (textContent), never
// as markup.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP serves the page, its script and style, and the state it polls.
// Only GET and HEAD are served: the dashboard changes nothing.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "api/state" {
		d.serveState(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	a, ok := assetByName[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(a.body)
}

// serveState answers the page's poll with the current objects (from the
// manager's cache, so a poll costs the apiserver nothing) and the sampled
// history and Events.
func (d *Dashboard) serveState(w http.ResponseWriter, r *http.Request) {
	var pools rcv1.CachePoolList
	if err := d.objects.List(r.Context(), &pools); err != nil {
		http.Error(w, "cannot list cache pools: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	var volumes rcv1.CachedVolumeList
	if err := d.objects.List(r.Context(), &volumes); err != nil {
		http.Error(w, "cannot list cached volumes: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	history, events, eventsErr := d.snapshot()
	state := buildState(d.now(), d.opts, pools.Items, volumes.Items, events, eventsErr, history)
	body, err := json.Marshal(state)
	if err != nil {
		http.Error(w, "cannot encode the state: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}
