package dashboard

import (
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// dom is the page as Chromium rendered it, parsed, with lookups by the
// ids and data-* attributes the page sets for exactly this purpose.
type dom struct {
	t    *testing.T
	root *html.Node
}

func parseDOM(t *testing.T, b []byte) *dom {
	t.Helper()
	root, err := html.Parse(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("parse the dumped DOM: %v", err)
	}
	return &dom{t: t, root: root}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// has returns a matcher of elements named tag (any when empty) whose
// attributes have the given values (pairs of key, value).
func has(tag string, kv ...string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		if n.Type != html.ElementNode || (tag != "" && n.Data != tag) {
			return false
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if v, ok := attr(n, kv[i]); !ok || v != kv[i+1] {
				return false
			}
		}
		return true
	}
}

// all returns the elements under n that match, in document order.
func all(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if match(c) {
			out = append(out, c)
		}
		out = append(out, all(c, match)...)
	}
	return out
}

// one returns the only element under n that matches; it fails otherwise.
func (d *dom) one(n *html.Node, what string, match func(*html.Node) bool) *html.Node {
	d.t.Helper()
	found := all(n, match)
	if len(found) != 1 {
		d.t.Fatalf("%s: found %d elements, want exactly one", what, len(found))
	}
	return found[0]
}

// text is the element's text content, as textContent would give it.
func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// cell checks the cell data-field=field of row: its text, and its raw
// value (data-value) when value is not empty.
func (d *dom) cell(row *html.Node, what, field, wantText, wantValue string) {
	d.t.Helper()
	found := all(row, has("td", "data-field", field))
	if len(found) != 1 {
		d.t.Errorf("%s: %d cells %q, want one", what, len(found), field)
		return
	}
	if got := text(found[0]); got != wantText {
		d.t.Errorf("%s %s: shows %q, want %q", what, field, got, wantText)
	}
	if wantValue != "" {
		if got, _ := attr(found[0], "data-value"); got != wantValue {
			d.t.Errorf("%s %s: data-value %q, want %q", what, field, got, wantValue)
		}
	}
}
