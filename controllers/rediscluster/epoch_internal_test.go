package rediscluster

import "testing"

// TestSharesEpoch: an empty master is made a replica only once no live
// master it knows has its config epoch (see sharesEpoch); a failed master,
// a node still in handshake and a replica (shown with its master's epoch)
// do not count.
func TestSharesEpoch(t *testing.T) {
	const (
		me     = "1111111111111111111111111111111111111111"
		master = "2222222222222222222222222222222222222222"
		other  = "3333333333333333333333333333333333333333"
	)
	line := func(id, addr, flags, masterID string, epoch, slots string) string {
		return id + " " + addr + "@16379 " + flags + " " + masterID + " 0 0 " + epoch + " connected " + slots + "\n"
	}
	for _, tc := range []struct {
		name  string
		nodes string
		want  bool
	}{
		{"new cluster, every node at 0", line(me, "10.0.0.1:6379", "myself,master", "-", "0", "") +
			line(master, "10.0.0.2:6379", "master", "-", "0", "0-5460"), true},
		{"the master's epoch", line(me, "10.0.0.1:6379", "myself,master", "-", "4", "") +
			line(master, "10.0.0.2:6379", "master", "-", "4", "0-5460"), true},
		{"an epoch of its own", line(me, "10.0.0.1:6379", "myself,master", "-", "5", "") +
			line(master, "10.0.0.2:6379", "master", "-", "4", "0-5460"), false},
		{"a failed master's", line(me, "10.0.0.1:6379", "myself,master", "-", "4", "") +
			line(master, "10.0.0.2:6379", "master,fail", "-", "4", "0-5460"), false},
		{"a replica shown with its master's", line(me, "10.0.0.1:6379", "myself,master", "-", "4", "") +
			line(master, "10.0.0.2:6379", "master", "-", "3", "0-5460") +
			line(other, "10.0.0.3:6379", "slave", master, "4", ""), false},
		{"a node in handshake", line(me, "10.0.0.1:6379", "myself,master", "-", "4", "") +
			line(other, "10.0.0.3:6379", "master,handshake", "-", "4", ""), false},
	} {
		nodes, err := ParseNodes(tc.nodes)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		v := &view{id: me, nodes: nodes}
		if got := v.sharesEpoch(); got != tc.want {
			t.Errorf("%s: sharesEpoch %v, want %v", tc.name, got, tc.want)
		}
	}
}
