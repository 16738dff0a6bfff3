package server

import (
	"strings"
)

// NormalizePath is the path that forward-auth puts in a descriptor entry
// (from: Path), so that spellings of one path that a backend serves alike
// share one counter and match the same policies:
//
//  1. The query and fragment are cut off.
//  2. Percent-encoded unreserved characters (letters, digits, "-", ".",
//     "_", "~") are decoded, as RFC 3986 §6.2.2.2 says they are equivalent:
//     /%6cogin is /login. Other percent-encodings stay encoded, in upper
//     case (%2f is %2F): a decoded "/" or "?" would change what the path
//     means. Malformed ones stay as they are.
//  3. Repeated slashes are one: //login and /a//b are /login and /a/b.
//  4. Dot segments are removed (RFC 3986 §5.2.4), never above the root:
//     /a/./b, /a/c/../b and /../a/b are /a/b, and so are /%2e/a/b and
//     /a/%2E%2E/a/b after step 2.
//  5. A trailing slash is removed, but for the root "/": /login/ is
//     /login. So a policy's path value names a path without its trailing
//     slash, and /login/ and /login count as one.
//
// A path that does not start with "/" gets one. The empty path is "/".
func NormalizePath(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if isNormalPath(raw) {
		return raw // the usual case: nothing to do, nothing allocated
	}
	decoded := decodeUnreserved(raw)
	segments := strings.Split(decoded, "/")
	out := make([]string, 0, len(segments))
	for _, s := range segments {
		switch s {
		case "", ".":
			// Repeated slashes and "." segments name nothing.
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

// isNormalPath reports whether NormalizePath would leave p as it is: it
// starts with "/", has no "%", no empty segment (repeated or trailing
// slash, but for the root), and no "." or ".." segment.
func isNormalPath(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' || strings.Contains(p, "%") || strings.Contains(p, "//") {
		return false
	}
	for s := range strings.SplitSeq(p[1:], "/") {
		if s == "." || s == ".." {
			return false
		}
	}
	return true
}

// decodeUnreserved decodes the percent-encoded unreserved characters of p
// and writes the other percent-encodings in upper case.
func decodeUnreserved(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			v := unhex(p[i+1])<<4 | unhex(p[i+2])
			if isUnreserved(v) {
				b.WriteByte(v)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex(p[i+1]))
				b.WriteByte(upperHex(p[i+2]))
			}
			i += 2
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
