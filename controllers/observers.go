package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/sluice-dev/sluice/controllers/observe"
)

// The reconcilers read what controllers/observe sees of the limiter pods
// through the interfaces below, which observe.AckTracker and
// observe.AdminClients implement; they tell it what to watch and nothing
// else.

// PodAcks is what the reconcilers need of the acknowledgement tracker.
type PodAcks interface {
	// Serve sets the policies (UID to "namespace/name") the fleet serves:
	// the only ones its pods may report on.
	Serve(fleet types.NamespacedName, served map[string]string)
	// Track sets the fleet's ready, trusted endpoints and the snapshot
	// version they should load.
	Track(fleet types.NamespacedName, endpoints []string, want string)
	// Acks returns what each tracked pod reported, and whether every one
	// has answered at least once.
	Acks(fleet types.NamespacedName) (acks []observe.PodAck, complete bool)
	// Confirm asks every pod of the fleet at once whether its store
	// answers, in a request sent after after.
	Confirm(fleet types.NamespacedName, after time.Time)
	// Forget stops tracking the fleet.
	Forget(fleet types.NamespacedName)
	// Subscribe returns a channel of an event per fleet whose pods'
	// answers changed.
	Subscribe() <-chan event.GenericEvent
}

// AdminTrust is what the fleet reconciler tells the admin plane's clients:
// which CA each fleet's pods are verified with.
type AdminTrust interface {
	SetCA(fleet types.NamespacedName, serverName string, caPEM []byte) error
	Trusts(fleet types.NamespacedName) bool
	Forget(fleet types.NamespacedName)
}

var (
	_ PodAcks    = (*observe.AckTracker)(nil)
	_ AdminTrust = (*observe.AdminClients)(nil)
)
