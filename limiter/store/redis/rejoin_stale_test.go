package redis_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
)

// TestIsolatedStalePrimary: a stopped node's pods may come back before
// its network reaches the other nodes. Its old primary then starts from
// its nodes.conf without hearing the cluster, so it keeps claiming its
// slots (an old config epoch) on its new address; here its peers' cluster
// bus ports are made unreachable in its copy of nodes.conf, so it stays
// that way. The store that lived through the failover never learns its
// new address and fails no decision. Stores built meanwhile with it among
// their seeds (a limiter pod on that node) may take its map first, when its
// answer is the first they get; once one has taken the heir's (a higher
// config epoch), it never takes the stale node's again (it did: they
// flipped between the two on each reload). Their failed decisions are
// told, not judged.
func TestIsolatedStalePrimary(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: rejoinNodeTimeout,
		Extra: rejoinExtra})
	s, _, err := rejoinStore(seedsOf(c), &logBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	keys := allKeys(t, s, c, 4)
	waitFor(t, settle, "every shard answers", func() error { return allAnswer(s, keys, 3) })
	d := startDecider(s, keys, 30*time.Millisecond)
	defer d.halt()
	old := c.Nodes[0]
	failOver(t, c, old)
	waitFor(t, settle, "every shard decided again", func() error { return allAnswer(s, keys, 3) })

	addr, slot := testnet.Addr(78, 6379), int64(c.Ranges[0][0])
	t0 := time.Now()
	w := watchView(t, addr, slot, t0)
	stale := redistest.StartNode(t, addr, isolatedCopy(t, old.Dir), rejoinNodeTimeout, rejoinExtra...)
	stopFresh := freshStores(t, c, stale.Addr, keys, 50*time.Millisecond)
	from, _ := d.counts(t0)
	waitFor(t, settle, "2000 decisions of the store that lived through the failover", func() error {
		if n, _ := d.counts(t0); n < from+2000 {
			return fmt.Errorf("%d decisions", n-from)
		}
		return nil
	})
	runs := stopFresh()
	d.halt()
	t.Logf("the isolated old primary's own view:\n\t%s", w.halt())
	if taken, fails := d.counts(t0); len(fails) > 0 {
		t.Errorf("the store that lived through the failover failed %d of %d decisions after the stale node started: %s",
			len(fails), taken-from, describe(fails, t0))
	}
	heir := c.Replicas[0][0].Addr
	for _, r := range runs {
		back := wentBack(r.logs.String(), heir, stale.Addr)
		if back != "" {
			// A store seeded with the stale node alone took its map
			// back after the heir's in a CI run: two fetches beside each
			// other, one judging the stale answer before the other took
			// the heir's and taking it after (TestConcurrentTakesKeepTheNewestMap).
			t.Errorf("a store built at %+dms, seeded with %s, took the stale node's map after the heir's: %s",
				r.built.Sub(t0).Milliseconds(), r.seeds, back)
		}
	}
	summary, failing := summarizeFresh(runs, t0)
	for _, line := range summary {
		t.Log(line)
	}
	t.Logf("%d of %d stores built meanwhile failed decisions or never knew their shards (told, not judged)", len(failing), len(runs))
	for _, f := range failing[:min(len(failing), 4)] {
		if len(f) > 1500 {
			f = f[:1500] + "..."
		}
		t.Log(f)
	}
}

// busPort is the cluster bus port of a node line of nodes.conf
// ("ip:port@cport[,hostname]").
var busPort = regexp.MustCompile(`^([^ ]+ [^ @]+)@[0-9]+`)

// isolatedCopy copies a node's dir and points every peer of its nodes.conf
// at a bus port that refuses connections (1): started from it, the node
// keeps its old view, unable to hear the cluster.
func isolatedCopy(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	if err := os.CopyFS(out, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(out, "redis.log"))
	conf := filepath.Join(out, "nodes.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		if !strings.Contains(line, "myself") && !strings.HasPrefix(line, "vars") {
			lines[i] = busPort.ReplaceAllString(line, "${1}@1")
		}
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// wentBack is the first log line in which a store took primary stale for a
// shard after it had taken heir, or "".
func wentBack(log, heir, stale string) string {
	sawHeir := false
	for line := range strings.SplitSeq(log, "\n") {
		if !strings.Contains(line, "Redis shard has a new primary") {
			continue
		}
		switch {
		case strings.Contains(line, "primary="+heir+" "):
			sawHeir = true
		case sawHeir && strings.Contains(line, "primary="+stale+" "):
			return line
		}
	}
	return ""
}
