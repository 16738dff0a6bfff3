package regions

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Peers authenticate with mutual TLS: every region has one certificate
// whose Subject Common Name is its region name, used both to serve its
// peer endpoint and to call the others, all chaining to a CA the regions
// share. A home takes the caller's region from its verified client
// certificate, never from the call's body; a caller believes a home only
// when the home's certificate names the region it called. Options.Insecure
// (the lab) keeps plain HTTP and bearer tokens instead.

// ServerTLS returns the peer endpoint's TLS configuration: it presents
// cert (CN: this region's name) and asks every caller for a certificate
// that chains to roots.
func ServerTLS(cert func() *tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert(), nil },
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      roots,
	}
}

// ClientTLS returns the TLS configuration of this region's grant calls:
// it presents cert and trusts servers chaining to roots.
func ClientTLS(cert func() *tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert(), nil },
		RootCAs:              roots,
	}
}

// peerClient is the client of grant calls to region name: base, also
// checking that the server's certificate is name's, so that a region can't
// answer as another's home.
func peerClient(base *tls.Config, name string, timeout time.Duration) *http.Client {
	cfg := base.Clone()
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the peer presented no certificate")
		}
		if cn := cs.PeerCertificates[0].Subject.CommonName; cn != name {
			return &wrongPeerError{fmt.Sprintf("the peer's certificate is region %q's, not %q's", cn, name)}
		}
		return nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	tr.ForceAttemptHTTP2 = true
	return &http.Client{Timeout: timeout, Transport: tr}
}

// authenticate returns the region that sent req, before its body is
// read: with TLS the Common Name of its verified client certificate; in
// the lab (Insecure) "", once the bearer token is this region's.
func (r *Regions) authenticate(req *http.Request) (string, error) {
	if r.opts.Insecure {
		token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok || r.opts.Token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(r.opts.Token)) != 1 {
			return "", refuse(http.StatusUnauthorized, ReasonUnauthorized, "region %s: the bearer token is not this region's peer token", r.opts.Region)
		}
		return "", nil
	}
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return "", refuse(http.StatusUnauthorized, ReasonUnauthorized, "region %s: a grant call needs a client certificate of the regions' CA", r.opts.Region)
	}
	return req.TLS.VerifiedChains[0][0].Subject.CommonName, nil
}

// callerRegion is the region a call is from: its authenticated identity,
// which the region the body claims must match; in the lab, the claim.
func (r *Regions) callerRegion(identity, claimed string) (string, error) {
	if r.opts.Insecure {
		return claimed, nil
	}
	if claimed != identity {
		return "", refuse(http.StatusForbidden, ReasonUnauthorized, "region %s: the call says it is region %q, its certificate is region %q's", r.opts.Region, claimed, identity)
	}
	return identity, nil
}

// wrongPeerError is a home whose certificate names another region.
type wrongPeerError struct{ msg string }

func (e *wrongPeerError) Error() string { return e.msg }

// transportReason is the reason of a grant call that got no HTTP answer:
// Unauthorized when either side refused the other's certificate, else
// Unreachable.
func transportReason(err error) string {
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	var wrong *wrongPeerError
	if errors.As(err, &alert) || errors.As(err, &verify) || errors.As(err, &wrong) {
		return ReasonUnauthorized
	}
	return ReasonUnreachable
}
