package server_test

import (
	"testing"

	"github.com/sluice-dev/sluice/limiter/server"
)

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/login", "/login"},
		{"/", "/"},
		{"", "/"},
		{"login", "/login"},
		{"/login?next=/admin", "/login"},
		{"/login#top", "/login"},
		// Percent-encoded unreserved characters are decoded.
		{"/%6cogin", "/login"},
		{"/%6C%6F%67%69%6E", "/login"},
		{"/a%2Db%5Fc%7Ed%2E", "/a-b_c~d."},
		// Others stay encoded, in upper case; malformed ones as they are.
		{"/a%2fb", "/a%2Fb"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a%3f", "/a%3F"},
		{"/caf%c3%a9", "/caf%C3%A9"},
		{"/100%", "/100%"},
		{"/%zz/%4", "/%zz/%4"},
		// Repeated slashes.
		{"//login", "/login"},
		{"/a//b///c", "/a/b/c"},
		// Dot segments, never above the root, decoded ones too.
		{"/a/./b", "/a/b"},
		{"/a/c/../b", "/a/b"},
		{"/../a/b", "/a/b"},
		{"/a/..", "/"},
		{"/a/%2e/b", "/a/b"},
		{"/a/x/%2E%2E/b", "/a/b"},
		{"/a/.%2e/login", "/login"},
		{"/a..b/.c", "/a..b/.c"},
		// The trailing slash.
		{"/login/", "/login"},
		{"/login//", "/login"},
		{"/login/.", "/login"},
		{"/a/b/", "/a/b"},
	} {
		if got := server.NormalizePath(tc.in); got != tc.want {
			t.Errorf("NormalizePath(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := server.NormalizePath(server.NormalizePath(tc.in)); got != tc.want {
			t.Errorf("NormalizePath is not idempotent on %q: %q", tc.in, got)
		}
	}
}

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/login", "/%6cogin", "//a/../b/", "/a%2f%2e%2E/./"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := server.NormalizePath(in)
		if out == "" || out[0] != '/' {
			t.Fatalf("NormalizePath(%q) = %q: not absolute", in, out)
		}
		if again := server.NormalizePath(out); again != out {
			t.Fatalf("NormalizePath(%q) = %q, then %q", in, out, again)
		}
	})
}
