package redis

import (
	"regexp"
	"testing"
)

// Every call from the scripts to Redis names its command literally, so
// ACLCommands, which reads them from the source, misses none.
func TestScriptsCallRedisByLiteralName(t *testing.T) {
	anyCall := regexp.MustCompile(`redis\.p?call\(`)
	for i, sc := range append([]script{grantScript}, scripts[:]...) {
		if sc.src == "" {
			continue // no algorithm 0
		}
		if all, literal := len(anyCall.FindAllString(sc.src, -1)), len(ScriptCommands(sc.src)); all != literal || all == 0 {
			t.Errorf("script %d: %d calls to Redis, %d by literal name", i, all, literal)
		}
	}
}
