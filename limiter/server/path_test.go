package server_test

import (
	"strings"
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
		{"/a%2Db%5Fc%7Ed%2E", "/a-b_c~d"},
		// Others stay encoded, in upper case; malformed ones as they are.
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
		// Segment parameters are cut at ";".
		{"/login;jsessionid=x", "/login"},
		{"/login;", "/login"},
		{"/a;x=1/b;y", "/a/b"},
		{"/a/b/..;/c", "/a/c"},
		{"/a%3Bx", "/a%3Bx"},
		// Trailing dots of a segment; a segment of dots only stays.
		{"/login.", "/login"},
		{"/login..", "/login"},
		{"/a./b", "/a/b"},
		{"/login%2e", "/login"},
		{"/a/.../b", "/a/.../b"},
		// The trailing slash.
		{"/login/", "/login"},
		{"/login//", "/login"},
		{"/login/.", "/login"},
		{"/a/b/", "/a/b"},
	} {
		got, refused := server.NormalizePath(tc.in, false)
		if got != tc.want || refused != "" {
			t.Errorf("NormalizePath(%q) = %q, %q; want %q, not refused", tc.in, got, refused, tc.want)
		}
		if again, _ := server.NormalizePath(got, false); again != tc.want {
			t.Errorf("NormalizePath is not idempotent on %q: %q", tc.in, again)
		}
	}
}

// An encoded slash or backslash is refused, in either case, and matched
// as a slash.
func TestNormalizePathRefusesEncodedSlashes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/login%2f", "/login"},
		{"/login%2F", "/login"},
		{"/a%2fb", "/a/b"},
		{"/a%5Cb", "/a/b"},
		{"/a%5c..%5clogin", "/login"},
	} {
		got, refused := server.NormalizePath(tc.in, false)
		if got != tc.want || !strings.Contains(refused, "encoded slash") {
			t.Errorf("NormalizePath(%q) = %q, %q; want %q, refused for its encoded slash", tc.in, got, refused, tc.want)
		}
	}
	if _, refused := server.NormalizePath("/login?next=%2F", false); refused != "" {
		t.Errorf("an encoded slash in the query: refused %q, want not (the query is cut)", refused)
	}
}

// With fold (pathCase Insensitive) letters are lower case, but for
// percent-encodings.
func TestNormalizePathFold(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/LOGIN", "/login"},
		{"/Login/", "/login"},
		{"/login", "/login"},
		{"/%4CoGiN", "/login"},
		{"/Caf%C3%A9", "/caf%C3%A9"},
		{"/a%3fB", "/a%3Fb"},
	} {
		got, refused := server.NormalizePath(tc.in, true)
		if got != tc.want || refused != "" {
			t.Errorf("NormalizePath(%q, fold) = %q, %q; want %q", tc.in, got, refused, tc.want)
		}
		if again, _ := server.NormalizePath(got, true); again != got {
			t.Errorf("NormalizePath(fold) is not idempotent on %q: %q", tc.in, again)
		}
	}
	if got, _ := server.NormalizePath("/LOGIN", false); got != "/LOGIN" {
		t.Errorf("NormalizePath(/LOGIN) without fold = %q, want /LOGIN", got)
	}
}

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/login", "/%6cogin", "//a/../b/", "/a%2f%2e%2E/./"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, fold := range []bool{false, true} {
			out, refused := server.NormalizePath(in, fold)
			if out == "" || out[0] != '/' {
				t.Fatalf("NormalizePath(%q, %v) = %q: not absolute", in, fold, out)
			}
			again, refusedAgain := server.NormalizePath(out, fold)
			if again != out || refusedAgain != "" {
				t.Fatalf("NormalizePath(%q, %v) = %q (refused %q), then %q (refused %q)", in, fold, out, refused, again, refusedAgain)
			}
		}
	})
}
