package regions

import (
	"crypto/tls"
	"testing"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
	"github.com/sluice-dev/sluice/internal/testpki"
)

// labCA is the lab's CA: every region's certificate chains to it.
type labCA struct{ *testpki.CA }

func newLabCA(t testing.TB) *labCA { return &labCA{testpki.NewCA(t, "sluice regions lab CA")} }

// issue returns a certificate named name (its Common Name), for serving
// on the lab's addresses and for calling.
func (ca *labCA) issue(t testing.TB, name string) *tls.Certificate {
	ips := []string{redistest.Host()}
	for i := 40; i < 50; i++ {
		ips = append(ips, testnet.IP(i))
	}
	return ca.Issue(t, name, ips...)
}

// tlsFor sets o up for mutual TLS as region name.
func (ca *labCA) tlsFor(t testing.TB, o *Options, name string) {
	cert := ca.issue(t, name)
	get := func() *tls.Certificate { return cert }
	o.ClientTLS, o.ServerTLS = ClientTLS(get, ca.Roots), ServerTLS(get, ca.Roots)
}
