package observe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/transport"
)

// AdminClients make the operator's calls to the limiter pods' admin
// plane: HTTPS only, verifying each fleet's pods with that fleet's CA and
// AdminTLSServerName, with each fleet's own bearer token (Tokens: minted
// for the fleet's audience), or one token for every fleet read from a file
// (read again as the kubelet rotates it). A fleet whose CA the operator
// does not know yet can't be called.
type AdminClients struct {
	base      *http.Client
	tokenFile string
	tokens    TokenSource

	mu     sync.Mutex
	fleets map[types.NamespacedName]*adminClient
}

type adminClient struct {
	caPEM  []byte
	client *http.Client
}

// NewAdminClients returns the admin clients: base's Transport (nil: the
// default), which must be an *http.Transport, with each fleet's TLS, base's
// Timeout, and the token of tokens for each fleet, or else tokenFile's token
// when tokenFile is set. An unreadable token file is an error.
func NewAdminClients(base *http.Client, tokenFile string, tokens TokenSource) (*AdminClients, error) {
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
	return &AdminClients{base: base, tokenFile: tokenFile, tokens: tokens, fleets: map[types.NamespacedName]*adminClient{}}, nil
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
	if a.tokens != nil {
		rt = &fleetBearer{tokens: a.tokens, fleet: fleet, next: tr}
	} else if a.tokenFile != "" {
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
	if m, ok := a.tokens.(*TokenMinter); ok {
		m.Forget(fleet)
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
