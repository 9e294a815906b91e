package cachepool

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Lifetimes of what the operator issues for a pool.
const (
	// caLifetime: the CA outlives any server certificate by far; it is
	// never rotated automatically (replacing it is deleting its Secret).
	caLifetime = 10 * 365 * 24 * time.Hour
	// serverCertLifetime: short enough that a leaked key stops working
	// soon; renewed when a third of it is left.
	serverCertLifetime = 90 * 24 * time.Hour
	// clockSkew backdates NotBefore so a server whose clock is a little
	// behind accepts a fresh certificate.
	clockSkew = 5 * time.Minute
)

// keyPair is a certificate with its key, parsed and as PEM.
type keyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// newCA issues a self-signed ECDSA P-256 CA for pool.
func newCA(pool string, now time.Time) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the CA key of pool %s: %w", pool, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "rackcache dataplane CA " + pool, Organization: []string{"rackcache"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return sign(tmpl, nil, key, key)
}

// newServerCert issues pool's server certificate for dnsName, signed by ca.
func newServerCert(ca *keyPair, dnsName string, now time.Time) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the server key for %s: %w", dnsName, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsName, Organization: []string{"rackcache"}},
		DNSNames:     []string{dnsName},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(serverCertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return sign(tmpl, ca.Cert, ca.Key, key)
}

// sign creates tmpl for key's public half, signed by parentKey (self-signed
// when parent is nil).
func sign(tmpl, parent *x509.Certificate, parentKey, key *ecdsa.PrivateKey) (*keyPair, error) {
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, fmt.Errorf("sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the key of %q: %w", tmpl.Subject.CommonName, err)
	}
	return &keyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate a certificate serial number: %w", err)
	}
	return n, nil
}

// parseKeyPair reads a PEM certificate and PKCS#8 ECDSA key. Errors never
// quote the key.
func parseKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	cert, err := parseCertificate(certPEM)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("private key is not PKCS#8")
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("private key is not ECDSA")
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("private key does not match the certificate")
	}
	return &keyPair{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func parseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return cert, nil
}

// renewalReason says why a server certificate must be issued again, or ""
// when it is good: it must chain to ca, name dnsName, and have more than a
// third of its lifetime left at now.
func renewalReason(cert, ca *x509.Certificate, dnsName string, now time.Time) string {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := cert.Verify(x509.VerifyOptions{
		DNSName:     dnsName,
		Roots:       roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	switch {
	case err != nil:
		return fmt.Sprintf("certificate does not verify against the pool's CA for %s: %v", dnsName, err)
	case needsRenewal(cert, now):
		return fmt.Sprintf("certificate expires %s, less than a third of its lifetime left", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// needsRenewal is true once less than a third of cert's lifetime is left.
func needsRenewal(cert *x509.Certificate, now time.Time) bool {
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return !now.Before(cert.NotAfter.Add(-lifetime / 3))
}
