package server

import (
	"strings"
	"testing"
)

// TestAttackTopQuery: TopPath's query bounds what one call may ask for (n,
// one value per parameter, known parameters only), so a caller can't make
// the limiter list or review without bound; a bad one is a 400 naming it.
func TestAttackTopQuery(t *testing.T) {
	if q, err := parseTopQuery("n=50&sort=limited&namespace=team-a"); err != nil || q.n != 50 || q.sort != "limited" || q.namespace != "team-a" {
		t.Errorf("a good query: %+v, %v", q, err)
	}
	if q, err := parseTopQuery(""); err != nil || q.n != 10 || q.sort != "decisions" || q.namespace != "" {
		t.Errorf("the defaults: %+v, %v", q, err)
	}
	for raw, want := range map[string]string{
		"n=0":                                  "want a number of policies from 1 to 50",
		"n=51":                                 "want a number of policies from 1 to 50",
		"n=1e9":                                "want a number of policies from 1 to 50",
		"n=1&n=2":                              `"n" is given 2 times`,
		"sort=name":                            `sort="name": want decisions or limited`,
		"namespace=":                           "want a namespace name",
		"namespace=" + strings.Repeat("a", 64): "want a namespace name",
		"domain=shop":                          `unknown query parameter "domain"`,
		"n=%zz":                                "invalid query",
	} {
		if _, err := parseTopQuery(raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", raw, err, want)
		}
	}
}
