package dashboard

import (
	"embed"
	"fmt"
)

// The page is three files built into the binary: nothing is fetched from
// anywhere else, so it works without Internet access and the
// Content-Security-Policy can forbid every other origin.
//
//go:embed assets/index.html assets/dashboard.js assets/dashboard.css
var assetFS embed.FS

type asset struct {
	body        []byte
	contentType string
}

// assetByName maps a name under Path to its file.
var assetByName = mustLoadAssets(map[string]string{
	"index.html":    "text/html; charset=utf-8",
	"dashboard.js":  "text/javascript; charset=utf-8",
	"dashboard.css": "text/css; charset=utf-8",
})

func mustLoadAssets(types map[string]string) map[string]asset {
	out := make(map[string]asset, len(types))
	for name, ct := range types {
		b, err := assetFS.ReadFile("assets/" + name)
		if err != nil {
			panic(fmt.Sprintf("dashboard: embedded asset %s: %v", name, err))
		}
		out[name] = asset{body: b, contentType: ct}
	}
	return out
}
