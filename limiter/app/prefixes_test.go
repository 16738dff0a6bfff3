package app_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/app"
)

func TestParsePrefixes(t *testing.T) {
	got, err := app.ParsePrefixes(" 10.0.0.0/8, 127.0.0.1,::1 ,fd00::/8,, 192.168.1.7/24")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("192.168.1.0/24"),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := app.ParsePrefixes(""); err != nil || got != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "nginx", "127.0.0.1:80"} {
		if _, err := app.ParsePrefixes(bad); err == nil || !strings.Contains(err.Error(), `"`+bad+`" is neither a CIDR nor an IP address`) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
