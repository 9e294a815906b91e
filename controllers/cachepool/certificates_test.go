package cachepool

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

func TestNeedsRenewal(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cert := &x509.Certificate{NotBefore: issued, NotAfter: issued.Add(90 * 24 * time.Hour)}
	cases := []struct {
		name string
		now  time.Time
		want bool
	}{
		{"just issued", issued, false},
		{"half way", issued.Add(45 * 24 * time.Hour), false},
		{"one hour before two thirds", issued.Add(60*24*time.Hour - time.Hour), false},
		{"at two thirds", issued.Add(60 * 24 * time.Hour), true},
		{"expired", issued.Add(100 * 24 * time.Hour), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := needsRenewal(cert, tc.now); got != tc.want {
				t.Errorf("needsRenewal at %s = %v, want %v", tc.now, got, tc.want)
			}
		})
	}
}

func TestIssuedCertificates(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ca, err := newCA("p", now)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.NotAfter.Sub(now) != caLifetime {
		t.Errorf("CA: IsCA %v, lifetime %s", ca.Cert.IsCA, ca.Cert.NotAfter.Sub(now))
	}
	srv, err := newServerCert(ca, "p.dataplane.rackcache.io", now)
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Cert.NotAfter.Sub(now); got != serverCertLifetime {
		t.Errorf("server certificate lifetime %s, want %s", got, serverCertLifetime)
	}
	parsed, err := parseKeyPair(srv.CertPEM, srv.KeyPEM)
	if err != nil {
		t.Fatalf("the issued pair does not parse back: %v", err)
	}
	if !parsed.Key.Equal(srv.Key) {
		t.Error("parsed key differs")
	}
	other, _ := newCA("other", now)
	mismatched, _ := newServerCert(other, "p.dataplane.rackcache.io", now)
	if _, err := parseKeyPair(srv.CertPEM, mismatched.KeyPEM); err == nil {
		t.Error("a key of another certificate was accepted")
	}

	cases := []struct {
		name    string
		cert    *x509.Certificate
		ca      *x509.Certificate
		dnsName string
		now     time.Time
		want    string // "" or a fragment of the reason
	}{
		{"fresh", srv.Cert, ca.Cert, "p.dataplane.rackcache.io", now, ""},
		{"renewal due", srv.Cert, ca.Cert, "p.dataplane.rackcache.io", now.Add(61 * 24 * time.Hour), "third of its lifetime"},
		{"expired", srv.Cert, ca.Cert, "p.dataplane.rackcache.io", now.Add(91 * 24 * time.Hour), "does not verify"},
		{"other CA", srv.Cert, other.Cert, "p.dataplane.rackcache.io", now, "does not verify"},
		{"other name", srv.Cert, ca.Cert, "q.dataplane.rackcache.io", now, "does not verify"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := renewalReason(tc.cert, tc.ca, tc.dnsName, tc.now)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("renewalReason = %q, want %q", got, tc.want)
			}
		})
	}
}
