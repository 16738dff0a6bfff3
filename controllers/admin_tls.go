package controllers

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"slices"
	"time"

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
