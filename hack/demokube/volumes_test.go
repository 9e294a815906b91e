package main

import "testing"

func TestRewritePaths(t *testing.T) {
	mounts := map[string]string{
		"/etc/rackcache/token":    "/demo/pod/rpc-token",
		"/etc/rackcache/tls":      "/demo/pod/rpc-tls",
		"/var/lib/rackcache/demo": "/demo/node-root/var/lib/rackcache/demo",
		"/var/lib/rackcache":      "/demo/other",
		"/demo/cache.img":         "/demo/cache.img",
	}
	for _, tc := range []struct{ arg, want string }{
		{"/etc/rackcache/token/token", "/demo/pod/rpc-token/token"},
		{"--rpc-tls-key=/etc/rackcache/tls/tls.key", "--rpc-tls-key=/demo/pod/rpc-tls/tls.key"},
		// The longest mount path wins.
		{"/var/lib/rackcache/demo/config.json", "/demo/node-root/var/lib/rackcache/demo/config.json"},
		{"/var/lib/rackcache/x", "/demo/other/x"},
		// A prefix that is not a path component is no match.
		{"/etc/rackcache/tlsx/a", "/etc/rackcache/tlsx/a"},
		{"/demo/cache.img", "/demo/cache.img"},
		{"--log-format", "--log-format"},
		{"json", "json"},
		{"--listen=127.0.0.1:5260", "--listen=127.0.0.1:5260"},
	} {
		if got := rewritePaths(tc.arg, mounts); got != tc.want {
			t.Errorf("rewritePaths(%q) = %q, want %q", tc.arg, got, tc.want)
		}
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"POD_IP": "127.0.0.1", "NODE_NAME": "n1"}
	for _, tc := range []struct{ in, want string }{
		{"--rpc-listen=$(POD_IP):5260", "--rpc-listen=127.0.0.1:5260"},
		{"$(NODE_NAME)-$(POD_IP)", "n1-127.0.0.1"},
		// Unknown references stay, as the kubelet leaves them.
		{"$(OTHER)", "$(OTHER)"},
		{"$POD_IP", "$POD_IP"},
	} {
		if got := expand(tc.in, env); got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
