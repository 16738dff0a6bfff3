package adminauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/adminauth"
)

// selfSigned returns a certificate for name with serial, and its key, PEM.
func selfSigned(t *testing.T, name string, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// writePair replaces the files as the kubelet does a Secret volume's:
// whole files, renamed into place.
func writePair(t *testing.T, dir string, certPEM, keyPEM []byte) (string, string) {
	t.Helper()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(f+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f+".new", f); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// served is the serial of the certificate a handshake with addr shows.
func served(t *testing.T, addr string) int64 {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate only
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// The admin plane's certificate is read again when its files change (the
// operator renews it into the mounted Secret): handshakes show the new one
// without a restart; a pair that does not match is refused at start with
// the files named, and a later one leaves the current pair in use.
func TestServerTLSReloadsTheCertificate(t *testing.T) {
	dir := t.TempDir()
	c1, k1 := selfSigned(t, "sluice-limiter.ns.svc", 1)
	certFile, keyFile := writePair(t, dir, c1, k1)

	c2, k2 := selfSigned(t, "sluice-limiter.ns.svc", 2)
	bad := filepath.Join(dir, "other.key")
	if err := os.WriteFile(bad, k2, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := adminauth.ServerTLS(certFile, bad, nil); err == nil || !strings.Contains(err.Error(), certFile) || !strings.Contains(err.Error(), bad) {
		t.Errorf("a certificate with another's key: %v, want an error naming both files", err)
	}
	if _, err := adminauth.ServerTLS(certFile, "", nil); err == nil {
		t.Error("a certificate without a key: no error")
	}

	cfg, err := adminauth.ServerTLS(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) { _ = c.(*tls.Conn).Handshake(); c.Close() }(c)
		}
	}()
	if got := served(t, l.Addr().String()); got != 1 {
		t.Fatalf("serial %d served, want 1", got)
	}

	// A half-written pair (the new certificate, the old key) is not used.
	writePair(t, dir, c2, k1)
	time.Sleep(adminauth.CertReloadCheck) // past the next check, which must fail
	if got := served(t, l.Addr().String()); got != 1 {
		t.Errorf("with a mismatched pair on disk, serial %d served, want 1 still", got)
	}

	writePair(t, dir, c2, k2)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := served(t, l.Addr().String())
		if got == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serial %d still served 30s after the files changed, want 2", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
