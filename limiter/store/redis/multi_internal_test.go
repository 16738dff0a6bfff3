package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
)

// A round trip's Takes on a standalone server share one script run: ten
// decisions of several algorithms, one of them idempotent and one with a
// penalty, are one EVALSHA, and each gets its own answer. A hold beside
// them keeps its own script. The clock stands still: the buckets of a
// second would refill a unit in 100ms between the two round trips.
func TestMultiOneRunPerRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternal(t, srv.Addr, storetest.NewClock().Now)
	c := srv.Client(t)
	ctx := context.Background()
	lims := []algo.Limit{
		{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10},
		{Algorithm: algo.GCRA, Limit: 10, Period: time.Second, Burst: 10},
		{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute},
		{Algorithm: algo.SlidingWindow, Limit: 10, Period: time.Minute},
		{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Minute},
	}
	reqs := make([]store.Request, 10)
	for i := range reqs {
		reqs[i] = store.Request{Key: storetest.KeyFor(t, fmt.Sprint("multi", i)), Limit: lims[i%len(lims)], Cost: int64(1 + i%3)}
	}
	reqs[3].Idempotency, reqs[3].IdempotencyTTL = storetest.IdemKey(t, "multi"), time.Minute
	reqs[4].Limit.Penalty = algo.Penalty{Duration: time.Minute, After: 2, Within: time.Minute}
	if _, errs := runBatch(s, reqs[:2]); errs[0] != nil || errs[1] != nil { // loads the script
		t.Fatal(errs)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := runBatch(s, reqs)
	for i, r := range res {
		want := lims[i%len(lims)].Capacity() - reqs[i].Cost
		if i < 2 { // decided once already
			want -= reqs[i].Cost
		}
		if errs[i] != nil || !r.Allowed || r.Remaining != want {
			t.Errorf("decision %d (%v, cost %d): %+v %v, want allowed with %d remaining", i, reqs[i].Limit.Algorithm, reqs[i].Cost, r, errs[i], want)
		}
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "cmdstat_evalsha:calls=1,") || strings.Contains(info, "cmdstat_eval:") {
		t.Errorf("ten decisions in one round trip, want one EVALSHA; Redis counted:\n%s", info)
	}

	// The idempotent decision replays, from the same run as others.
	res, errs = runBatch(s, []store.Request{reqs[3], reqs[0]})
	if errs[0] != nil || !res[0].Replayed || res[0].Remaining != lims[3].Capacity()-reqs[3].Cost {
		t.Errorf("a retried idempotent decision: %+v %v, want its replay", res[0], errs[0])
	}
}

// A run that fails as a whole fails each of its decisions with its
// error: NOSCRIPT is sent again with EVAL, and every decision is decided.
// The clock stands still, so that no unit refills between the rounds.
func TestMultiNoScript(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternal(t, srv.Addr, storetest.NewClock().Now)
	c := srv.Client(t)
	lim := algo.Limit{Algorithm: algo.GCRA, Limit: 20, Period: time.Minute, Burst: 20}
	reqs := []store.Request{
		{Key: storetest.KeyFor(t, "ns1"), Limit: lim, Cost: 1},
		{Key: storetest.KeyFor(t, "ns2"), Limit: lim, Cost: 2},
	}
	for i := range 3 {
		if err := c.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		res, errs := runBatch(s, reqs)
		for j := range reqs {
			if want := 20 - int64(i+1)*reqs[j].Cost; errs[j] != nil || res[j].Remaining != want {
				t.Fatalf("round %d, decision %d after SCRIPT FLUSH: %+v %v, want %d remaining", i, j, res[j], errs[j], want)
			}
		}
	}
}

// A round trip of more than multiMax decisions sends them in runs of at
// most multiMax (Redis answers no one else while a script runs), and each
// decision gets its own answer. The clock stands still, so that no
// window ends between the two round trips.
func TestMultiRunsOfAtMostMultiMax(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternal(t, srv.Addr, storetest.NewClock().Now)
	c := srv.Client(t)
	ctx := context.Background()
	lim := algo.Limit{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour}
	reqs := make([]store.Request, 2*multiMax+multiMax/2)
	for i := range reqs {
		reqs[i] = store.Request{Key: storetest.KeyFor(t, fmt.Sprint("runs", i%100)), Limit: lim, Cost: 1 + int64(i%7)}
	}
	if _, errs := runBatch(s, reqs[:2]); errs[0] != nil || errs[1] != nil { // loads the script
		t.Fatal(errs)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	spent := map[store.Key]int64{reqs[0].Key: reqs[0].Cost, reqs[1].Key: reqs[1].Cost}
	res, errs := runBatch(s, reqs)
	for i, r := range res {
		spent[reqs[i].Key] += reqs[i].Cost
		if want := lim.Limit - spent[reqs[i].Key]; errs[i] != nil || !r.Allowed || r.Remaining != want {
			t.Fatalf("decision %d of %d: %+v %v, want allowed with %d remaining", i, len(reqs), r, errs[i], want)
		}
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "cmdstat_evalsha:calls=3,") {
		t.Errorf("%d decisions in one round trip, want 3 EVALSHA of at most %d; Redis counted:\n%s", len(reqs), multiMax, info)
	}
}
