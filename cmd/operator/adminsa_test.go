package main

import (
	"strings"
	"testing"
)

// --admin-token-service-account takes namespace/name, and names itself
// when it is wrong.
func TestServiceAccountFlag(t *testing.T) {
	if sa, err := serviceAccountFlag("sluice-system/sluice-operator"); err != nil || sa.Namespace != "sluice-system" || sa.Name != "sluice-operator" {
		t.Errorf("sluice-system/sluice-operator: %v, %v", sa, err)
	}
	if sa, err := serviceAccountFlag(""); err != nil || sa.Name != "" {
		t.Errorf("empty: %v, %v; want none", sa, err)
	}
	for _, bad := range []string{"sluice-operator", "/x", "x/", "a/b/c"} {
		if _, err := serviceAccountFlag(bad); err == nil || !strings.Contains(err.Error(), "--admin-token-service-account") {
			t.Errorf("%q: %v, want an error naming the flag", bad, err)
		}
	}
}
