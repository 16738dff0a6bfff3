package observe

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// fleetTokens gives each fleet a token named after it.
type fleetTokens struct{}

func (fleetTokens) Token(_ context.Context, fleet types.NamespacedName) (string, error) {
	return "token-of-" + fleet.String(), nil
}

// Each fleet's client sends that fleet's token, and no other's: what the
// limiters of fleet a receive can't be replayed to fleet b's.
func TestAdminClientsSendEachFleetItsOwnToken(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
	}))
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	admin, err := NewAdminClients(nil, "", fleetTokens{})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	for _, fleet := range []types.NamespacedName{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}} {
		if err := admin.SetCA(fleet, "example.com", caPEM); err != nil {
			t.Fatal(err)
		}
		c, req, err := adminRequest(t.Context(), admin, nil, fleet, u.Host, "/v1/admin/stats", "")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h, want := <-got, "Bearer token-of-"+fleet.String(); h != want {
			t.Errorf("fleet %s's call carried %q, want %q", fleet, h, want)
		}
	}
}
