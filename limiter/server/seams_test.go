package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// The attack, on a fleet: its forward-auth mapping fills the priority key
// of a load shedder from X-Priority, a header any client sets, so every
// client asks for critical and takes the share kept for it. The operator's
// snapshot carries the fleet's mapping and the tenants' policies apart, so
// forward-auth refuses the mapping where both meet: a 500 naming the
// policy and the entry (nginx and Traefik deny on it), and nothing counted.
func TestAttackFleetForwardAuthFillsPriorityFromHeader(t *testing.T) {
	const policy = `
domain: shop
descriptors: [{key: service, value: shop}]
limit:
  type: Rate
  rate:
    algorithm: FixedWindow
    limit: 10
    period: 1m
    priority: {levels: [{value: critical, share: 100}, {value: batch, share: 50}], default: batch}
`
	var spec v1beta1.RateLimitPolicySpec
	if err := yaml.UnmarshalStrict([]byte(policy), &spec); err != nil {
		t.Fatal(err)
	}
	doc := config.Document{
		Policies: []config.DocumentPolicy{{Namespace: "shop", Name: "shed", Spec: spec}},
		ForwardAuth: []v1beta1.ForwardAuth{{Domain: "shop", Descriptors: []v1beta1.ForwardAuthDescriptor{
			{Key: "service", From: v1beta1.FromHost},
			{Key: "priority", From: v1beta1.FromHeader, Header: ptr.To("X-Priority")},
		}}},
	}
	data, _ := config.EncodeDocument(doc)
	snap, err := config.ParseDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, envOptions{snapshot: snap})
	resp, body := forwardAuth(t, e, http.MethodGet, "shop", map[string]string{"X-Forwarded-Host": "shop", "X-Priority": "critical"})
	want := `fills the entry "priority", the priority key of policy shop/shed, from the request header "X-Priority"`
	var answer struct{ Error string }
	_ = json.Unmarshal(body, &answer)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(answer.Error, want) {
		t.Fatalf("forward-auth with a client's X-Priority: %d %s; want 500 saying %q", resp.StatusCode, body, want)
	}
}
