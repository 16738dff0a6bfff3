package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
)

// sharedDomain: tenant-a counts per user_id in a domain it shares with
// tenant-b, whose Concurrency policy names its lease entry.
func sharedDomain(leaseEntry string) string {
	return `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: tenant-a}
spec:
  domain: shared
  descriptors: [{key: user_id}]
  rate: {limit: 10, period: 1m}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: in-flight, namespace: tenant-b}
spec:
  domain: shared
  descriptors: [{key: tenant, value: b}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 5, leaseEntry: ` + leaseEntry + `}
`
}

// The attack: tenant-b sets concurrency.leaseEntry: user_id, a key only
// tenant-a's policy counts on. A lease entry applies to the whole domain,
// so every request carrying user_id would be refused as a malformed lease.
// The policies can't share the domain: the file is refused, naming both.
func TestAttackLeaseEntryCollidesWithAnotherPolicysKey(t *testing.T) {
	_, err := config.Parse("shared.yaml", []byte(sharedDomain("user_id")))
	if err == nil {
		t.Fatal("loaded a domain where tenant-b's lease entry is the user_id that tenant-a counts on: every request with user_id would be refused")
	}
	for _, want := range []string{"tenant-b/in-flight", `its lease entry "user_id"`, "tenant-a/per-user", `domain "shared"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := config.Parse("shared.yaml", []byte(sharedDomain("b_lease"))); err != nil {
		t.Fatalf("a lease entry no policy counts on: %v", err)
	}
}

// The other order, and priority keys: a policy that counts on (or sheds
// by) an entry that is another policy's lease entry is refused too.
func TestEntryConflictsEitherWay(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"descriptor on a lease entry": {sharedDomain("sluice_lease") + `---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: by-lease, namespace: tenant-c}
spec:
  domain: shared
  descriptors: [{key: sluice_lease}]
  rate: {limit: 10, period: 1m}
`, `tenant-c/by-lease: it counts on the entry "sluice_lease" (spec.descriptors or its priority key), which is the lease entry of policy tenant-b/in-flight`},
		"priority key on a lease entry": {sharedDomain("prio") + `---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: shed, namespace: tenant-c}
spec:
  domain: shared
  descriptors: [{key: service, value: c}]
  rate: {limit: 10, period: 1m}
  priority: {key: prio, levels: [{value: high, share: 100}, {value: low, share: 50}], default: high}
`, `tenant-c/shed: it counts on the entry "prio"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Parse("shared.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}

// The attack: a policy file's forward-auth fills a priority key from a
// client's header, or a lease entry: a client would choose its own
// priority, or end holdings. The file is refused at load.
func TestAttackForwardAuthFillsReservedEntry(t *testing.T) {
	const policies = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: shed, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: service, value: shop}]
  rate: {limit: 100, period: 1s}
  priority: {key: priority, levels: [{value: critical, share: 100}, {value: batch, share: 50}], default: batch}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: in-flight, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: service, value: cart}]
  algorithm: Concurrency
  concurrency: {maxInFlight: 5}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: default, namespace: sluice-system}
spec:
  forwardAuth:
  - domain: shop
    descriptors:
    - {key: service, from: Host}
`
	for name, tc := range map[string]struct{ mapping, want string }{
		"priority from a header": {`    - {key: priority, from: Header, header: X-Priority}`,
			`spec.dataPlane.forwardAuth[0]: the forwardAuth mapping of domain "shop" fills the entry "priority", the priority key of policy shop/shed, from the request header "X-Priority"`},
		"a lease entry": {`    - {key: sluice_lease, from: Header, header: X-Lease}`,
			`the forwardAuth mapping of domain "shop" builds the entry "sluice_lease", the lease entry of policy shop/in-flight`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Parse("shop.yaml", []byte(policies+tc.mapping+"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
	// Priority from what the gateway knows (here the host) is fine.
	if _, err := config.Parse("shop.yaml", []byte(policies+"    - {key: priority, from: Host}\n")); err != nil {
		t.Fatalf("priority from the host: %v", err)
	}
}

// A policy file's LimiterFleet declares the entries that steer the
// limiter; the policies must agree with it, or the file is refused.
func TestFleetEntriesInAPolicyFile(t *testing.T) {
	const fleet = `---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: edge, namespace: sluice-system}
spec:
  entries: {lease: sluice_lease, idempotency: idem, priority: prio}
`
	if _, err := config.Parse("ok.yaml", []byte(sharedDomain("sluice_lease")+fleet)); err != nil {
		t.Fatalf("policies that agree with the fleet's entries: %v", err)
	}
	_, err := config.Parse("bad.yaml", []byte(sharedDomain("b_lease")+fleet))
	want := `tenant-b/in-flight: the policy's lease entry "b_lease" (spec.concurrency.leaseEntry or spec.reserve.leaseEntry in v1alpha1, sluice_lease by default) is not the one LimiterFleet sluice-system/edge declares for its domains (spec.entries.lease: "sluice_lease")`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one that says %q", err, want)
	}
	_, err = config.Parse("bad.yaml", []byte(strings.Replace(sharedDomain("sluice_lease"), "key: user_id", "key: idem", 1)+fleet))
	want = `tenant-a/per-user: spec.descriptors[0].key "idem" is an entry that LimiterFleet sluice-system/edge reserves (spec.entries.idempotency)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one that says %q", err, want)
	}
	// The accept entry steers the answer's body: a fleet that declares it
	// serves no policy that counts on it (a client's Accept header would
	// pick its counter).
	withAccept := strings.Replace(fleet, "priority: prio}", "priority: prio, accept: accept}", 1)
	_, err = config.Parse("bad.yaml", []byte(strings.Replace(sharedDomain("sluice_lease"), "key: user_id", "key: accept", 1)+withAccept))
	want = `tenant-a/per-user: spec.descriptors[0].key "accept" is an entry that LimiterFleet sluice-system/edge reserves (spec.entries.accept)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one that says %q", err, want)
	}
}
