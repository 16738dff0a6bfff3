package observe

import (
	"context"
	"fmt"

	"net/http"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// TokenSource gives the bearer token of a fleet's admin plane.
type TokenSource interface {
	Token(ctx context.Context, fleet types.NamespacedName) (string, error)
}

// DefaultAdminTokenLifetime is how long a minted admin token lives.
const DefaultAdminTokenLifetime = time.Hour

// TokenMinter mints tokens of one ServiceAccount (the operator's own)
// with the TokenRequest API, one per fleet for that fleet's audience
// (limiterwire.FleetAdminAudience), so that a limiter pod can't replay
// what it receives to another fleet. Each is kept until 80% of its
// lifetime has passed, as the kubelet renews projected tokens. It is safe
// for concurrent use.
type TokenMinter struct {
	// ServiceAccounts is the client of the ServiceAccount's namespace.
	ServiceAccounts corev1client.ServiceAccountInterface
	// Name is the ServiceAccount's name.
	Name string
	// Lifetime is the lifetime asked for; 0 means DefaultAdminTokenLifetime.
	Lifetime time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu     sync.Mutex
	tokens map[types.NamespacedName]mintedToken
}

type mintedToken struct {
	token    string
	renewAt  time.Time
	audience string
}

// Token returns a token for fleet's audience, minting one when none is
// kept or the kept one is due for renewal.
func (m *TokenMinter) Token(ctx context.Context, fleet types.NamespacedName) (string, error) {
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	aud := limiterwire.FleetAdminAudience(fleet.Namespace, fleet.Name)
	if t, ok := m.tokens[fleet]; ok && t.audience == aud && now().Before(t.renewAt) {
		return t.token, nil
	}
	life := m.Lifetime
	if life <= 0 {
		life = DefaultAdminTokenLifetime
	}
	tr, err := m.ServiceAccounts.CreateToken(ctx, m.Name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{aud}, ExpirationSeconds: ptrInt64(int64(life / time.Second)),
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("minting a token of ServiceAccount %s for audience %s: %w", m.Name, aud, err)
	}
	issued := now()
	// Renew after 80% of the lifetime the API server granted (it may cut it).
	granted := tr.Status.ExpirationTimestamp.Sub(issued)
	if granted <= 0 || granted > life {
		granted = life
	}
	if m.tokens == nil {
		m.tokens = map[types.NamespacedName]mintedToken{}
	}
	m.tokens[fleet] = mintedToken{token: tr.Status.Token, renewAt: issued.Add(granted * 4 / 5), audience: aud}
	return tr.Status.Token, nil
}

// Forget drops fleet's token.
func (m *TokenMinter) Forget(fleet types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tokens, fleet)
}

func ptrInt64(v int64) *int64 { return &v }

// fleetBearer sets each request's bearer token to its fleet's.
type fleetBearer struct {
	tokens TokenSource
	fleet  types.NamespacedName
	next   http.RoundTripper
}

func (b *fleetBearer) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := b.tokens.Token(req.Context(), b.fleet)
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("the admin token of fleet %s: %w", b.fleet, err)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return b.next.RoundTrip(r)
}
