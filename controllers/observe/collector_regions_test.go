package observe

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// regionsStatus sums the pods' views per peer the spec names: a peer one
// pod can't reach is not reachable (the most telling reason wins, naming
// the pod), held units and keys add up, the last exchange is the latest,
// and a peer no pod has called leaves the condition Unknown.
func TestRegionsStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	view := func(peers ...limiterwire.RegionPeer) *limiterwire.Regions {
		return &limiterwire.Regions{Region: "a", Peers: peers}
	}
	reached := func(name string, since time.Time, held int64) limiterwire.RegionPeer {
		return limiterwire.RegionPeer{Name: name, Reachable: true, Reason: "Reachable", Since: since, LastExchange: since.Add(time.Minute), Keys: 2, HeldUnits: held}
	}
	failed := func(name, reason string) limiterwire.RegionPeer {
		return limiterwire.RegionPeer{Name: name, Reason: reason, Message: "no " + name, Since: t0}
	}

	// Both pods reach b and c.
	regions, cond := regionsStatus([]string{"c", "b"}, []podRegions{
		{"10.0.0.1:8082", view(reached("b", t0, 5), reached("c", t0, 1))},
		{"10.0.0.2:8082", view(reached("b", t0.Add(time.Second), 7), reached("c", t0, 0))},
	}, nil, 2)
	if cond.Status != metav1.ConditionTrue || cond.Reason != v1beta1.PeersReachableReason {
		t.Fatalf("condition %+v, want True PeersReachable", cond)
	}
	if len(regions) != 2 || regions[0].Name != "b" || regions[0].HeldUnits != 12 || regions[0].Keys != 4 || regions[0].Pods != 2 ||
		!regions[0].Since.Time.Equal(t0.Add(time.Second)) || !regions[0].LastExchange.Time.Equal(t0.Add(time.Second+time.Minute)) {
		t.Fatalf("status.regions %+v", regions)
	}

	// One pod can't reach b, and c refuses the other's token: the
	// configuration to fix comes first, each peer named.
	regions, cond = regionsStatus([]string{"b", "c"}, []podRegions{
		{"10.0.0.1:8082", view(failed("b", "Unreachable"), reached("c", t0, 0))},
		{"10.0.0.2:8082", view(reached("b", t0, 3), failed("c", "Unauthorized"))},
	}, []string{"10.0.0.3:8082: timeout"}, 3)
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1beta1.PeerUnauthorizedReason {
		t.Fatalf("condition %+v, want False PeerUnauthorized", cond)
	}
	for _, s := range []string{"peer b Unreachable: 10.0.0.1:8082: no b", "peer c Unauthorized: 10.0.0.2:8082: no c", "1 pods unread"} {
		if !strings.Contains(cond.Message, s) {
			t.Errorf("condition message %q lacks %q", cond.Message, s)
		}
	}
	if regions[0].Reachable || regions[0].Reason != "Unreachable" || regions[1].Reachable || regions[1].Reason != "Unauthorized" {
		t.Fatalf("status.regions %+v", regions)
	}

	// A peer no pod has called yet, and one the pods don't know (old
	// flags); a peer a pod names that the spec does not is left out.
	regions, cond = regionsStatus([]string{"b", "d"}, []podRegions{
		{"10.0.0.1:8082", view(limiterwire.RegionPeer{Name: "b", Reason: "NoExchangeYet"}, reached("z", t0, 99))},
	}, nil, 1)
	if cond.Status != metav1.ConditionUnknown || cond.Reason != v1beta1.NoExchangeYetReason || !strings.Contains(cond.Message, "b, d") {
		t.Fatalf("condition %+v, want Unknown NoExchangeYet naming b, d", cond)
	}
	if len(regions) != 2 || regions[0].Pods != 1 || regions[1].Pods != 0 || regions[0].HeldUnits != 0 {
		t.Fatalf("status.regions %+v", regions)
	}

	// No pod read.
	if regions, cond = regionsStatus([]string{"b"}, nil, []string{"10.0.0.1:8082: refused"}, 1); regions != nil ||
		cond.Status != metav1.ConditionUnknown || cond.Reason != v1beta1.PodsUnreadReason || !strings.Contains(cond.Message, "10.0.0.1:8082: refused") {
		t.Fatalf("no pod read: %+v %+v", regions, cond)
	}
}

// Attack: a limiter pod's answer is the pod's to write, and a pod may be
// compromised. It can't grow the fleet's status past the peers the spec
// names (status.regions is at most 8), nor put an unbounded message
// there, nor make a negative count.
func TestAttackRegionsStatusFromAPod(t *testing.T) {
	var peers []limiterwire.RegionPeer
	for i := range 10000 {
		peers = append(peers, limiterwire.RegionPeer{Name: "p" + strings.Repeat("x", i%50), Reason: "Refused", Message: strings.Repeat("m", 100000)})
	}
	peers = append(peers, limiterwire.RegionPeer{Name: "b", Reason: "Refused", Message: strings.Repeat("m", 100000), Keys: -5, HeldUnits: -1 << 40})
	regions, cond := regionsStatus([]string{"b"}, []podRegions{{"10.0.0.1:8082", &limiterwire.Regions{Peers: peers}}}, nil, 1)
	if len(regions) != 1 || len(regions[0].Message) > maxRegionMessage || regions[0].Keys < 0 || regions[0].HeldUnits < 0 {
		t.Fatalf("status.regions from a hostile pod: %d entries, message %d bytes, keys %d, held %d",
			len(regions), len(regions[0].Message), regions[0].Keys, regions[0].HeldUnits)
	}
	if len(cond.Message) > maxConditionMsg {
		t.Fatalf("condition message %d bytes", len(cond.Message))
	}
}
