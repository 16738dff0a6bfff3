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
	// More items than the sample: at most evictionSample are looked at, so
	// the victim is never the globally latest when the sample holds others.
	big := map[int]int64{}
	for i := range 1000 {
		big[i] = int64(100 + i)
	}
	for range 20 {
		k, _, ok := sampleVictim(big, 0, nil, at)
		if !ok || k == 999 {
			t.Fatalf("victim %d ok=%v: the latest to expire of 1000", k, ok)
		}
	}
}
