package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSServer is a redis-server that also listens with TLS.
type TLSServer struct {
	*Server
	// TLSAddr is the TLS listener's address; Server.Addr stays plain, for
	// the helpers' own checks.
	TLSAddr string
	// CAFile is the PEM file of the CA that signed the server's
	// certificate, for clients to verify it with.
	CAFile string
}

// ServerName is the DNS name in a TLSServer's certificate, besides the IPs
// Host() and 127.0.0.1.
const ServerName = "redis.sluice.test"

// StartTLS runs a standalone redis-server on free ports of Host(), one plain
// and one TLS, with a certificate for Host(), 127.0.0.1 and ServerName signed by a
// CA of its own. Clients need no certificate. Extra config directives are
// "name value".
func StartTLS(t testing.TB, extra ...string) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)
	tlsAddr := FreeAddr(t, Host())
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	cfg := []string{"tls-port " + tlsPort, "tls-cert-file " + certFile, "tls-key-file " + keyFile,
		"tls-ca-cert-file " + caFile, "tls-auth-clients no"}
	s := startIn(t, FreeAddr(t, Host()), dir, append(cfg, extra...)...)
	return &TLSServer{Server: s, TLSAddr: tlsAddr, CAFile: caFile}
}

// writeCerts writes a new CA and a server certificate it signs into dir.
func writeCerts(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, caCert := newCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "sluice test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	key, cert := newCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: ServerName}, DNSNames: []string{ServerName},
		IPAddresses: []net.IP{net.ParseIP(Host()), net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, caCert, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePEM(t, caFile, "CERTIFICATE", caCert.Raw)
	writePEM(t, certFile, "CERTIFICATE", cert.Raw)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return caFile, certFile, keyFile
}

// newCert creates tmpl's certificate with a new key, signed by parent (self-
// signed when parent is nil).
func newCert(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
