package memory

import "testing"

// sampleVictim is the one sampled eviction of every map of the store: an
// expired item first, else the one closest to expiry among the sample,
// never the skipped one.
func TestSampleVictim(t *testing.T) {
	at := func(v int64) int64 { return v }
	// Fewer items than the sample: all are seen.
	m := map[string]int64{"a": 30, "b": 10, "c": 20}
	if k, expired, ok := sampleVictim(m, 5, nil, at); k != "b" || expired || !ok {
		t.Fatalf("nothing expired: %q expired=%v ok=%v, want b (soonest)", k, expired, ok)
	}
	if k, expired, ok := sampleVictim(m, 25, nil, at); !ok || !expired || (k != "b" && k != "c") {
		t.Fatalf("b and c expired at 25: %q expired=%v ok=%v, want one of them, expired", k, expired, ok)
	}
	skip := "b"
	if k, expired, ok := sampleVictim(m, 5, &skip, at); k != "c" || expired || !ok {
		t.Fatalf("b skipped: %q expired=%v ok=%v, want c", k, expired, ok)
	}
	if _, _, ok := sampleVictim(map[string]int64{"b": 1}, 5, &skip, at); ok {
		t.Fatal("only the skipped item: ok, want none")
	}
	if _, _, ok := sampleVictim(map[string]int64{}, 5, nil, at); ok {
		t.Fatal("empty map: ok, want none")
	}
	// More items than the sample: only evictionSample are looked at, so
	// the globally soonest (0) is picked only when sampled (16 in 1000).
	big := map[int]int64{}
	for i := range 1000 {
		big[i] = int64(100 + i)
	}
	soonest := 0
	for range 20 {
		k, _, ok := sampleVictim(big, 0, nil, at)
		if !ok {
			t.Fatal("1000 items: none picked")
		}
		if k == 0 {
			soonest++
		}
	}
	if soonest == 20 {
		t.Fatal("the globally soonest item picked 20 times in 20: the whole map was scanned, not a sample")
	}
}
