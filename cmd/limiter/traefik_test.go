package main_test

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/limiter/server"
)

// traefikDynamic is the part of Traefik's dynamic configuration the sample
// uses; decoding is strict, so a misspelt key fails.
type traefikDynamic struct {
	HTTP struct {
		Middlewares map[string]struct {
			ForwardAuth *struct {
				Address             string   `json:"address"`
				TrustForwardHeader  bool     `json:"trustForwardHeader"`
				AuthResponseHeaders []string `json:"authResponseHeaders"`
				AuthRequestHeaders  []string `json:"authRequestHeaders"`
			} `json:"forwardAuth"`
		} `json:"middlewares"`
		Routers map[string]struct {
			Rule        string   `json:"rule"`
			EntryPoints []string `json:"entryPoints"`
			Middlewares []string `json:"middlewares"`
			Service     string   `json:"service"`
		} `json:"routers"`
		Services map[string]struct {
			LoadBalancer struct {
				Servers []struct {
					URL string `json:"url"`
				} `json:"servers"`
			} `json:"loadBalancer"`
		} `json:"services"`
	} `json:"http"`
}

// TestTraefikSample checks the Traefik sample's keys, then calls a real
// limiter loaded with the sample policies at the sample's address as
// Traefik's ForwardAuth does.
func TestTraefikSample(t *testing.T) {
	var cfg traefikDynamic
	if err := yaml.UnmarshalStrict(readSample(t, "traefik/dynamic.yaml"), &cfg); err != nil {
		t.Fatalf("traefik/dynamic.yaml: %v", err)
	}
	fa := cfg.HTTP.Middlewares["sluice"].ForwardAuth
	if fa == nil {
		t.Fatal("no forwardAuth middleware named sluice")
	}
	addr, err := url.Parse(fa.Address)
	if err != nil || addr.Host != limiterService+":8080" || addr.Path != "/v1/forward-auth/gateway" {
		t.Fatalf("forwardAuth.address %q: want the limiter's HTTP port and /v1/forward-auth/gateway (%v)", fa.Address, err)
	}
	if fa.TrustForwardHeader {
		t.Error("trustForwardHeader is true: clients could choose their own X-Forwarded-For")
	}
	// Only the headers the mapping reads reach the limiter (Traefik adds
	// its X-Forwarded-* to them): no other client header can make the
	// limiter refuse to read the call.
	if !slices.Equal(fa.AuthRequestHeaders, []string{"X-Api-Key"}) {
		t.Errorf("authRequestHeaders %q, want [X-Api-Key], the one header the sample mapping reads", fa.AuthRequestHeaders)
	}
	for _, h := range []string{server.HeaderRateLimit, server.HeaderRateLimitPolicy, server.HeaderLimit, server.HeaderRemaining, server.HeaderReset} {
		if !slices.Contains(fa.AuthResponseHeaders, h) {
			t.Errorf("authResponseHeaders lack %s", h)
		}
	}
	r, ok := cfg.HTTP.Routers["app"]
	if !ok || !slices.Contains(r.Middlewares, "sluice") {
		t.Fatalf("router app does not use the sluice middleware: %+v", cfg.HTTP.Routers)
	}
	if _, ok := cfg.HTTP.Services[r.Service]; !ok {
		t.Fatalf("router app's service %q is not defined", r.Service)
	}

	lim := startLimiter(t, "--policies", gatewayPolicies, "--trusted-proxies", "127.0.0.1")
	call := func(key string) *http.Response {
		t.Helper()
		// What Traefik sends: the original method (as X-Forwarded-Method,
		// the call itself is a GET), URI, host and client, and the
		// client's headers.
		req, err := http.NewRequest(http.MethodGet, lim.http+addr.Path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-Method", "POST")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Forwarded-Host", "shop.example")
		req.Header.Set("X-Forwarded-Uri", "/v1/orders?id=7")
		req.Header.Set("X-Forwarded-For", "198.51.100.9")
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := 1; i <= apiKeyLimit; i++ {
		resp := call("traefik-key")
		if resp.StatusCode != http.StatusOK || resp.Header.Get(server.HeaderRemaining) != strconv.Itoa(apiKeyLimit-i) {
			t.Fatalf("call %d: %d, X-RateLimit-Remaining %q", i, resp.StatusCode, resp.Header.Get(server.HeaderRemaining))
		}
	}
	resp := call("traefik-key")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(server.HeaderRetryAfter) == "" ||
		!strings.Contains(resp.Header.Get(server.HeaderRateLimit), `"default/requests-per-api-key";r=0`) {
		t.Fatalf("over the limit: %d %v, want the sample's denyStatus 403 with Retry-After and RateLimit", resp.StatusCode, resp.Header)
	}
}
