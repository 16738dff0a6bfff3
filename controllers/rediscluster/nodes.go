package rediscluster

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Node is one line of CLUSTER NODES: a node as the answering node sees it.
type Node struct {
	ID string
	// Addr is ip:port, or "" when the node has no address yet (noaddr,
	// or a node that does not know its own IP).
	Addr string
	// BusPort is the cluster bus port.
	BusPort int
	// Flags are the comma-separated flags: myself, master, slave, fail?,
	// fail, handshake, noaddr, nofailover, noflags.
	Flags []string
	// MasterID is the master a replica follows, or "".
	MasterID string
	// PingSent and PongRecv are unix milliseconds (0: none pending/never).
	PingSent, PongRecv int64
	ConfigEpoch        int64
	// Connected is the link state: true for "connected".
	Connected bool
	// Slots are the slot ranges the node serves, first and last.
	Slots [][2]int
	// Migrating maps a slot to the node ID it is migrating to, and
	// Importing a slot to the node ID it is importing from. Only a node's
	// own line shows them.
	Migrating, Importing map[int]string
}

// Has reports whether the node has flag f.
func (n Node) Has(f string) bool { return slices.Contains(n.Flags, f) }

// Master reports whether the node is a master.
func (n Node) Master() bool { return n.Has("master") }

// Failed reports whether the node is flagged fail (agreed), not only fail?.
func (n Node) Failed() bool { return n.Has("fail") }

// Pending reports whether the node is in handshake or has no address: an
// entry that gossip has not settled.
func (n Node) Pending() bool { return n.Has("handshake") || n.Has("noaddr") }

// SlotCount is the number of slots the node serves.
func (n Node) SlotCount() int {
	c := 0
	for _, r := range n.Slots {
		c += r[1] - r[0] + 1
	}
	return c
}

// ParseNodes parses a CLUSTER NODES reply. It rejects anything that is not
// one well-formed line per node, so that a node answering garbage is told
// apart from an empty cluster.
func ParseNodes(s string) ([]Node, error) {
	var nodes []Node
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n, err := parseNodeLine(line)
		if err != nil {
			return nil, fmt.Errorf("CLUSTER NODES line %d %q: %w", i+1, truncate(line, 120), err)
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("CLUSTER NODES: empty reply")
	}
	return nodes, nil
}

func parseNodeLine(line string) (Node, error) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return Node{}, fmt.Errorf("%d fields, want at least 8", len(f))
	}
	n := Node{ID: f[0], Flags: strings.Split(f[2], ",")}
	if !validID(n.ID) {
		return Node{}, fmt.Errorf("bad node ID %q", n.ID)
	}
	var err error
	if n.Addr, n.BusPort, err = parseNodeAddr(f[1]); err != nil {
		return Node{}, err
	}
	if f[3] != "-" {
		if !validID(f[3]) {
			return Node{}, fmt.Errorf("bad master ID %q", f[3])
		}
		n.MasterID = f[3]
	}
	nums := []*int64{&n.PingSent, &n.PongRecv, &n.ConfigEpoch}
	for i, p := range nums {
		if *p, err = strconv.ParseInt(f[4+i], 10, 64); err != nil {
			return Node{}, fmt.Errorf("bad number %q", f[4+i])
		}
	}
	switch f[7] {
	case "connected":
		n.Connected = true
	case "disconnected":
	default:
		return Node{}, fmt.Errorf("bad link state %q", f[7])
	}
	for _, s := range f[8:] {
		if err := n.addSlots(s); err != nil {
			return Node{}, err
		}
	}
	return n, nil
}

// validID: 40 hex characters.
func validID(id string) bool {
	if len(id) != 40 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// parseNodeAddr parses ip:port@cport[,hostname]; ":0@0" and ":port@cport"
// (no IP known) give "".
func parseNodeAddr(s string) (string, int, error) {
	s, _, _ = strings.Cut(s, ",")
	hp, bus, ok := strings.Cut(s, "@")
	if !ok {
		return "", 0, fmt.Errorf("bad address %q: no bus port", s)
	}
	bp, err := strconv.Atoi(bus)
	if err != nil || bp < 0 || bp > 65535 {
		return "", 0, fmt.Errorf("bad bus port in %q", s)
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("bad address %q: %v", s, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", s)
	}
	if host == "" || p == 0 {
		return "", bp, nil
	}
	return net.JoinHostPort(host, port), bp, nil
}

// addSlots adds one slot field: "5", "0-5460", "[93->-id]" or "[93-<-id]".
func (n *Node) addSlots(s string) error {
	if strings.HasPrefix(s, "[") {
		body, ok := strings.CutSuffix(s[1:], "]")
		if !ok {
			return fmt.Errorf("bad open slot %q", s)
		}
		for _, sep := range []string{"->-", "-<-"} {
			slot, id, found := strings.Cut(body, sep)
			if !found {
				continue
			}
			v, err := parseSlot(slot)
			if err != nil || !validID(id) {
				return fmt.Errorf("bad open slot %q", s)
			}
			m := &n.Migrating
			if sep == "-<-" {
				m = &n.Importing
			}
			if *m == nil {
				*m = map[int]string{}
			}
			(*m)[v] = id
			return nil
		}
		return fmt.Errorf("bad open slot %q", s)
	}
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := parseSlot(lo)
	if err != nil {
		return err
	}
	b := a
	if isRange {
		if b, err = parseSlot(hi); err != nil {
			return err
		}
		if b < a {
			return fmt.Errorf("bad slot range %q", s)
		}
	}
	n.Slots = append(n.Slots, [2]int{a, b})
	return nil
}

func parseSlot(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v >= SlotCount {
		return 0, fmt.Errorf("bad slot %q", s)
	}
	return v, nil
}

// ParseInfo parses CLUSTER INFO (or INFO) into its fields.
func ParseInfo(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || k == "" {
			return nil, fmt.Errorf("INFO line %q is not field:value", truncate(line, 80))
		}
		m[k] = v
	}
	return m, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
