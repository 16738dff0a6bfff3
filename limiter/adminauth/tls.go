package adminauth

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CertReloadCheck is how often, at most, the certificate files are
// checked for a change, on the handshakes that need them.
const CertReloadCheck = time.Second

// ServerTLS returns the admin plane's TLS configuration: the certificate
// and key in certFile and keyFile (PEM), read again when either file
// changes (Kubernetes rewrites a mounted Secret in place when the operator
// renews it), checked at most every CertReloadCheck. A pair that can't be
// read or doesn't match fails here; a later bad pair is logged and the
// previous one kept.
func ServerTLS(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("the admin plane's TLS needs both a certificate and a key file")
	}
	if log == nil {
		log = slog.Default()
	}
	get, err := CertReloader("admin TLS", certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return get(), nil },
	}, nil
}

// CertReloader returns the certificate and key in certFile and keyFile
// (PEM), read again when either file changes, checked at most every
// CertReloadCheck; what names them in errors and logs. A pair that can't
// be read or doesn't match fails here; a later bad pair is logged and the
// previous one kept.
func CertReloader(what, certFile, keyFile string, log *slog.Logger) (func() *tls.Certificate, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &certReloader{what: what, certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r.get, nil
}

type certReloader struct {
	what              string
	certFile, keyFile string
	log               *slog.Logger

	mu              sync.Mutex
	cert            *tls.Certificate
	certPEM, keyPEM []byte
	checked         time.Time
}

// load reads both files and installs the pair when it differs.
func (r *certReloader) load() error {
	certPEM, err := os.ReadFile(r.certFile)
	if err != nil {
		return fmt.Errorf("%s certificate: %w", r.what, err)
	}
	keyPEM, err := os.ReadFile(r.keyFile)
	if err != nil {
		return fmt.Errorf("%s key: %w", r.what, err)
	}
	if bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s certificate %s and key %s: %w", r.what, r.certFile, r.keyFile, err)
	}
	if r.cert != nil {
		r.log.Info("Loaded a new TLS certificate", "for", r.what, "file", r.certFile)
	}
	r.cert, r.certPEM, r.keyPEM = &cert, certPEM, keyPEM
	return nil
}

func (r *certReloader) get() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= CertReloadCheck {
		r.checked = now
		if err := r.load(); err != nil {
			r.log.Error("Keeping the TLS certificate loaded before", "for", r.what, "error", err)
		}
	}
	return r.cert
}
