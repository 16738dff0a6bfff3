package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// adminCertRecheck is how often the operator reads the admin TLS Secrets
// again while the certificate it knows is current.
const adminCertRecheck = 5 * time.Minute

func adminCertDNSNames(fleet *v1alpha1.LimiterFleet) []string {
	svc := resources.AdminTLSServerName(fleet)
	return []string{svc, svc + ".cluster.local"}
}

// NewAdminCA creates a self-signed CA for the fleet's admin plane, valid
// from now for RedisCAValidity.
func NewAdminCA(fleet *v1alpha1.LimiterFleet, now time.Time) (*RedisCA, []byte, error) {
	return newCA(fmt.Sprintf("sluice limiter admin CA %s/%s", fleet.Namespace, fleet.Name), now)
}

// IssueAdminCert issues the admin plane's serving certificate for the
// fleet, valid from now for RedisCertValidity.
func IssueAdminCert(fleet *v1alpha1.LimiterFleet, ca *RedisCA, now time.Time) (certPEM, keyPEM []byte, err error) {
	return signCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: resources.AdminTLSServerName(fleet)},
		DNSNames:    adminCertDNSNames(fleet),
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(resources.RedisCertValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca.Cert, ca.Key)
}

// adminCertCurrent says why certPEM must be replaced at now, or "".
func adminCertCurrent(fleet *v1alpha1.LimiterFleet, ca *RedisCA, certPEM []byte, now time.Time) string {
	cert, err := parseCert(certPEM)
	switch {
	case err != nil:
		return "no valid certificate: " + err.Error()
	case cert.CheckSignatureFrom(ca.Cert) != nil:
		return "not signed by the CA"
	case !slices.Equal(cert.DNSNames, adminCertDNSNames(fleet)):
		return "names other hosts"
	case now.Add(resources.RedisCertRenewBefore).After(cert.NotAfter):
		return "expires at " + cert.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}

// reconcileAdminTLS makes sure the fleet's admin CA and certificate exist
// and are current, and tells the admin clients which CA to trust. It reads
// the Secrets again at most every adminCertRecheck while the certificate
// is current.
func (r *LimiterFleetReconciler) reconcileAdminTLS(ctx context.Context, s *fleetScope) error {
	fleet, now := s.fleet, time.Now()
	if r.adminCerts.fresh(fleet.UID, now) && r.Admin.Trusts(client.ObjectKeyFromObject(fleet)) {
		return nil
	}
	ca, err := r.adminCA(ctx, fleet, now)
	if err != nil {
		return err
	}
	existing, err := r.ownedSecret(ctx, fleet, resources.AdminTLSSecretName(fleet))
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	why := "none yet"
	if existing != nil {
		data = existing.Data
		why = adminCertCurrent(fleet, ca, existing.Data[corev1.TLSCertKey], now)
	}
	if why != "" {
		certPEM, keyPEM, err := IssueAdminCert(fleet, ca, now)
		if err != nil {
			return err
		}
		logf.FromContext(ctx).Info("Issuing the limiters' admin certificate", "fleet", client.ObjectKeyFromObject(fleet), "replaces", why)
		data = map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}
	}
	data[resources.RedisTLSCAKey] = ca.CertPEM
	secret, err := r.writeSecret(ctx, fleet, existing, resources.BuildAdminSecret(fleet, resources.AdminTLSSecretName(fleet), data))
	if err != nil {
		return err
	}
	if err := r.Admin.SetCA(client.ObjectKeyFromObject(fleet), resources.AdminTLSServerName(fleet), secret.Data[resources.RedisTLSCAKey]); err != nil {
		return err
	}
	cert, err := parseCert(secret.Data[corev1.TLSCertKey])
	if err != nil {
		return fmt.Errorf("Secret %s: %w", resources.AdminTLSSecretName(fleet), err)
	}
	r.adminCerts.record(fleet.UID, now, cert.NotAfter)
	return nil
}

// adminCA reads the fleet's admin CA, which it creates when missing or
// expired.
func (r *LimiterFleetReconciler) adminCA(ctx context.Context, fleet *v1alpha1.LimiterFleet, now time.Time) (*RedisCA, error) {
	existing, err := r.ownedSecret(ctx, fleet, resources.AdminCASecretName(fleet))
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if ca, err := ParseRedisCA(existing.Data[corev1.TLSCertKey], existing.Data[corev1.TLSPrivateKeyKey]); err == nil && now.Before(ca.Cert.NotAfter) {
			return ca, nil
		}
	}
	ca, keyPEM, err := NewAdminCA(fleet, now)
	if err != nil {
		return nil, err
	}
	logf.FromContext(ctx).Info("Creating the limiters' admin CA", "fleet", client.ObjectKeyFromObject(fleet))
	_, err = r.writeSecret(ctx, fleet, existing, resources.BuildAdminSecret(fleet, resources.AdminCASecretName(fleet),
		map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: keyPEM}))
	return ca, err
}

// AdminClients make the operator's calls to the limiter pods' admin
// plane: HTTPS only, verifying each fleet's pods with that fleet's CA and
// AdminTLSServerName, with the bearer token of a file (read again as the
// kubelet rotates it). A fleet whose CA the operator does not know yet
// can't be called.
type AdminClients struct {
	base      *http.Client
	tokenFile string

	mu     sync.Mutex
	fleets map[types.NamespacedName]*adminClient
}

type adminClient struct {
	caPEM  []byte
	client *http.Client
}

// NewAdminClients returns the admin clients: base's Transport (nil: the
// default), which must be an *http.Transport, with each fleet's TLS, base's
// Timeout, and tokenFile's token when tokenFile is set. An unreadable token
// file is an error.
func NewAdminClients(base *http.Client, tokenFile string) (*AdminClients, error) {
	if base == nil {
		base = &http.Client{Timeout: 10 * time.Second} // above AckTracker.LongPoll
	}
	if base.Transport != nil {
		if _, ok := base.Transport.(*http.Transport); !ok {
			return nil, fmt.Errorf("admin client: a %T transport can't carry each fleet's TLS; want *http.Transport", base.Transport)
		}
	}
	if tokenFile != "" {
		if _, err := transport.NewBearerAuthWithRefreshRoundTripper("", tokenFile, http.DefaultTransport); err != nil {
			return nil, fmt.Errorf("admin token file: %w", err)
		}
	}
	return &AdminClients{base: base, tokenFile: tokenFile, fleets: map[types.NamespacedName]*adminClient{}}, nil
}

// SetCA makes the fleet's client trust caPEM for serverName; the same CA
// keeps the client and its connections.
func (a *AdminClients) SetCA(fleet types.NamespacedName, serverName string, caPEM []byte) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.fleets[fleet]; c != nil && string(c.caPEM) == string(caPEM) {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("the admin CA of fleet %s: no PEM certificate", fleet)
	}
	var tr *http.Transport
	if a.base.Transport != nil {
		tr = a.base.Transport.(*http.Transport).Clone()
	} else {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	tr.Proxy = nil
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
	var rt http.RoundTripper = tr
	if a.tokenFile != "" {
		var err error
		if rt, err = transport.NewBearerAuthWithRefreshRoundTripper("", a.tokenFile, tr); err != nil {
			return fmt.Errorf("admin token file: %w", err)
		}
	}
	if old := a.fleets[fleet]; old != nil {
		old.client.CloseIdleConnections()
	}
	a.fleets[fleet] = &adminClient{caPEM: caPEM, client: noRedirects(&http.Client{Transport: rt, Timeout: a.base.Timeout})}
	return nil
}

// Trusts says whether the fleet's CA is known.
func (a *AdminClients) Trusts(fleet types.NamespacedName) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fleets[fleet] != nil
}

// Forget drops a deleted fleet's client.
func (a *AdminClients) Forget(fleet types.NamespacedName) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.fleets[fleet]; c != nil {
		c.client.CloseIdleConnections()
		delete(a.fleets, fleet)
	}
}

// errNoAdminCA: the fleet's admin certificate is not issued yet.
var errNoAdminCA = errors.New("the fleet's admin plane CA is not known yet")

// For returns the fleet's client.
func (a *AdminClients) For(fleet types.NamespacedName) (*http.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.fleets[fleet]; c != nil {
		return c.client, nil
	}
	return nil, errNoAdminCA
}

// adminRequest prepares a GET of an admin path on a pod of fleet: HTTPS
// with the fleet's client when admin is set, else plain HTTP with plain
// (tests of the tracker and collector alone).
func adminRequest(ctx context.Context, admin *AdminClients, plain *http.Client, fleet types.NamespacedName, addr, path, query string) (*http.Client, *http.Request, error) {
	c, scheme := plain, "http"
	if admin != nil {
		var err error
		if c, err = admin.For(fleet); err != nil {
			return nil, nil, err
		}
		scheme = "https"
	}
	u := scheme + "://" + addr + path
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	return c, req, err
}
