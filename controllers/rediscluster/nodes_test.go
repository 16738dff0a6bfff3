package rediscluster

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

const (
	idA = "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"
	idB = "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1"
)

func TestParseNodesDocsExample(t *testing.T) {
	b, err := os.ReadFile("testdata/nodes-6.txt")
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := ParseNodes(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 6 {
		t.Fatalf("%d nodes", len(nodes))
	}
	me := nodes[5]
	if !me.Has("myself") || !me.Master() || me.Addr != "127.0.0.1:30001" || me.BusPort != 31001 ||
		!reflect.DeepEqual(me.Slots, [][2]int{{0, 5460}}) || me.SlotCount() != 5461 || !me.Connected {
		t.Fatalf("myself = %+v", me)
	}
	if r := nodes[0]; r.Master() || r.MasterID != idA || r.PongRecv != 1426238317239 || r.ConfigEpoch != 4 {
		t.Fatalf("replica = %+v", r)
	}
}

func TestParseNodesStates(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		check      func(Node) bool
	}{
		{"fresh node knows no IP", idA + " :6379@16379 myself,master - 0 0 0 connected",
			func(n Node) bool { return n.Addr == "" && n.BusPort == 16379 && n.SlotCount() == 0 }},
		{"handshake", idA + " 127.0.0.42:6379@16379 handshake - 1700000000000 0 0 disconnected",
			func(n Node) bool { return n.Pending() && !n.Connected && n.PingSent == 1700000000000 }},
		{"noaddr", idA + " :0@0 master,fail,noaddr - 1700000000000 1699999990000 3 disconnected 0-5460",
			func(n Node) bool { return n.Pending() && n.Failed() && n.Addr == "" && n.SlotCount() == 5461 }},
		{"fail", idA + " 127.0.0.41:6379@16379 master,fail - 1700000000000 1699999990000 1 disconnected 0-100 200",
			func(n Node) bool { return n.Failed() && reflect.DeepEqual(n.Slots, [][2]int{{0, 100}, {200, 200}}) }},
		{"pfail is not fail", idA + " 127.0.0.41:6379@16379 master,fail? - 1700000000000 0 1 disconnected 0-100",
			func(n Node) bool { return !n.Failed() && n.Has("fail?") }},
		{"migrating and importing", idA + " 127.0.0.41:6379@16379 myself,master - 0 0 1 connected 0-5460 [93->-" + idB + "] [6000-<-" + idB + "]",
			func(n Node) bool {
				return n.Migrating[93] == idB && n.Importing[6000] == idB && n.SlotCount() == 5461
			}},
		{"replica", idA + " 127.0.0.44:6379@16379 slave,nofailover " + idB + " 0 1700000000000 2 connected",
			func(n Node) bool { return !n.Master() && n.MasterID == idB && n.Has("nofailover") }},
		{"IPv6", idA + " [::1]:6379@16379 master - 0 0 1 connected",
			func(n Node) bool { return n.Addr == "[::1]:6379" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, err := ParseNodes(tc.line + "\n")
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(nodes[0]) {
				t.Fatalf("parsed %+v", nodes[0])
			}
		})
	}
}

func TestParseNodesRejectsGarbage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty reply"},
		{"hello world", "at least 8"},
		{"xyz 127.0.0.1:6379@16379 master - 0 0 1 connected", "bad node ID"},
		{idA + " 127.0.0.1:6379 master - 0 0 1 connected", "no bus port"},
		{idA + " 127.0.0.1:6379@16379 master nope 0 0 1 connected", "bad master ID"},
		{idA + " 127.0.0.1:6379@16379 master - x 0 1 connected", "bad number"},
		{idA + " 127.0.0.1:6379@16379 master - 0 0 1 sideways", "bad link state"},
		{idA + " 127.0.0.1:6379@16379 master - 0 0 1 connected 16384", "bad slot"},
		{idA + " 127.0.0.1:6379@16379 master - 0 0 1 connected 10-5", "bad slot range"},
		{idA + " 127.0.0.1:6379@16379 master - 0 0 1 connected [5->-nope]", "bad open slot"},
		{idA + " 127.0.0.1:6379@16379 master - 0 0 1 connected [5]", "bad open slot"},
	} {
		_, err := ParseNodes(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseNodes(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestParseInfo(t *testing.T) {
	m, err := ParseInfo("cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_known_nodes:6\r\n")
	if err != nil || m["cluster_state"] != "ok" || m["cluster_known_nodes"] != "6" {
		t.Fatalf("ParseInfo = %v, %v", m, err)
	}
	if _, err := ParseInfo("+PONG junk\r\n"); err == nil {
		t.Fatal("junk parsed")
	}
}

// FuzzParseNodes: no input panics, and whatever parses holds valid slots
// and IDs.
func FuzzParseNodes(f *testing.F) {
	b, _ := os.ReadFile("testdata/nodes-6.txt")
	f.Add(string(b))
	f.Add(idA + " :0@0 master,fail,noaddr - 1 2 3 disconnected 0-5460 [93->-" + idB + "]")
	f.Add(idA + " [::1]:6379@16379,host myself,master - 0 0 1 connected 5 [6-<-" + idB + "]")
	f.Fuzz(func(t *testing.T, s string) {
		nodes, err := ParseNodes(s)
		if err != nil {
			return
		}
		for _, n := range nodes {
			if !validID(n.ID) || (n.MasterID != "" && !validID(n.MasterID)) {
				t.Fatalf("bad ID in %+v", n)
			}
			for _, r := range n.Slots {
				if r[0] < 0 || r[1] >= SlotCount || r[0] > r[1] {
					t.Fatalf("bad range %v", r)
				}
			}
		}
	})
}
