package controllers

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// adminCertRecheck is how often the operator reads the admin TLS Secrets
// again while the certificate it knows is current.
const adminCertRecheck = 5 * time.Minute

func adminCertDNSNames(fleet *v1beta1.LimiterFleet) []string {
	svc := resources.AdminTLSServerName(fleet)
	return []string{svc, svc + ".cluster.local"}
}

// NewAdminCA creates a self-signed CA for the fleet's admin plane, valid
// from now for RedisCAValidity.
func NewAdminCA(fleet *v1beta1.LimiterFleet, now time.Time) (*redisfleet.RedisCA, []byte, error) {
	return redisfleet.NewCA(fmt.Sprintf("sluice limiter admin CA %s/%s", fleet.Namespace, fleet.Name), now)
}

// IssueAdminCert issues the admin plane's serving certificate for the
// fleet, valid from now for RedisCertValidity.
func IssueAdminCert(fleet *v1beta1.LimiterFleet, ca *redisfleet.RedisCA, now time.Time) (certPEM, keyPEM []byte, err error) {
	return redisfleet.SignCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: resources.AdminTLSServerName(fleet)},
		DNSNames:    adminCertDNSNames(fleet),
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(resources.RedisCertValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca.Cert, ca.Key)
}

// adminCertCurrent says why certPEM must be replaced at now, or "".
func adminCertCurrent(fleet *v1beta1.LimiterFleet, ca *redisfleet.RedisCA, certPEM []byte, now time.Time) string {
	cert, err := redisfleet.ParseCert(certPEM)
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
	existing, err := r.secrets.OwnedSecret(ctx, fleet, resources.AdminTLSSecretName(fleet))
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
	secret, err := r.secrets.WriteSecret(ctx, fleet, existing, resources.BuildAdminSecret(fleet, resources.AdminTLSSecretName(fleet), data))
	if err != nil {
		return err
	}
	if err := r.Admin.SetCA(client.ObjectKeyFromObject(fleet), resources.AdminTLSServerName(fleet), secret.Data[resources.RedisTLSCAKey]); err != nil {
		return err
	}
	cert, err := redisfleet.ParseCert(secret.Data[corev1.TLSCertKey])
	if err != nil {
		return fmt.Errorf("Secret %s: %w", resources.AdminTLSSecretName(fleet), err)
	}
	r.adminCerts.record(fleet.UID, now, cert.NotAfter)
	return nil
}

// adminCA reads the fleet's admin CA, which it creates when missing or
// expired.
func (r *LimiterFleetReconciler) adminCA(ctx context.Context, fleet *v1beta1.LimiterFleet, now time.Time) (*redisfleet.RedisCA, error) {
	existing, err := r.secrets.OwnedSecret(ctx, fleet, resources.AdminCASecretName(fleet))
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if ca, err := redisfleet.ParseRedisCA(existing.Data[corev1.TLSCertKey], existing.Data[corev1.TLSPrivateKeyKey]); err == nil && now.Before(ca.Cert.NotAfter) {
			return ca, nil
		}
	}
	ca, keyPEM, err := NewAdminCA(fleet, now)
	if err != nil {
		return nil, err
	}
	logf.FromContext(ctx).Info("Creating the limiters' admin CA", "fleet", client.ObjectKeyFromObject(fleet))
	_, err = r.secrets.WriteSecret(ctx, fleet, existing, resources.BuildAdminSecret(fleet, resources.AdminCASecretName(fleet),
		map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: keyPEM}))
	return ca, err
}
