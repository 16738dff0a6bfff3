package server

import (
	"fmt"
	"strings"
)

// NormalizePath is the path that forward-auth puts in a descriptor entry
// (from: Path), so that spellings of one path that a backend serves alike
// share one counter and match the same policies:
//
//  1. The query and fragment are cut off.
//  2. A path holding an encoded slash or backslash (%2F, %5C) is refused:
//     refused says why. Backends differ on whether /login%2F is /login/ or
//     a file named "login/", so matching sees each as a slash (/login%2F
//     is /login), and a refused path that matches an enforcing policy is
//     denied.
//  3. Percent-encoded unreserved characters (letters, digits, "-", ".",
//     "_", "~") are decoded, as RFC 3986 §6.2.2.2 says they are equivalent:
//     /%6cogin is /login. Other percent-encodings stay encoded, in upper
//     case (%3f is %3F): a decoded "?" would change what the path means.
//     Malformed ones stay as they are.
//  4. A segment's parameters are cut at its first ";", as servlet
//     containers do before routing: /login;jsessionid=x and /login; are
//     /login, and /a/..;/b is /a/../b.
//  5. Trailing dots of a segment are removed, as Windows servers do and
//     others would serve a 404: /login. is /login. A segment of dots only
//     ("..." ) stays.
//  6. Repeated slashes are one: //login and /a//b are /login and /a/b.
//  7. Dot segments are removed (RFC 3986 §5.2.4), never above the root:
//     /a/./b, /a/c/../b and /../a/b are /a/b, and so are /%2e/a/b and
//     /a/%2E%2E/a/b after step 3.
//  8. A trailing slash is removed, but for the root "/": /login/ is
//     /login. So a policy's path value names a path without its trailing
//     slash, and /login/ and /login count as one.
//  9. With fold (a mapping's pathCase Insensitive), ASCII letters are
//     lower case, but for percent-encodings: /LOGIN is /login.
//
// A path that does not start with "/" gets one. The empty path is "/".
func NormalizePath(raw string, fold bool) (path, refused string) {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if isNormalPath(raw, fold) {
		return raw, "" // the usual case: nothing to do, nothing allocated
	}
	if hasEncodedSlash(raw) {
		refused = fmt.Sprintf("the path %q holds an encoded slash or backslash (%%2F, %%5C), which backends route differently: send it unencoded", clipValue(raw))
		raw = encodedSlashes.Replace(raw)
	}
	segments := strings.Split(decodeUnreserved(raw), "/")
	out := make([]string, 0, len(segments))
	for _, s := range segments {
		if i := strings.IndexByte(s, ';'); i >= 0 {
			s = s[:i]
		}
		if t := strings.TrimRight(s, "."); t != "" {
			s = t
		}
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
	path = "/" + strings.Join(out, "/")
	if fold {
		path = foldPath(path)
	}
	return path, refused
}

// isNormalPath reports whether NormalizePath would leave p as it is: it
// starts with "/", has no "%" or ";", no empty segment (repeated or
// trailing slash, but for the root), no segment that ends in "." (a dot
// segment among them) and, with fold, no upper-case letter.
func isNormalPath(p string, fold bool) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' || strings.ContainsAny(p, "%;") || strings.Contains(p, "//") {
		return false
	}
	if fold && strings.IndexFunc(p, func(r rune) bool { return 'A' <= r && r <= 'Z' }) >= 0 {
		return false
	}
	for s := range strings.SplitSeq(p[1:], "/") {
		if strings.HasSuffix(s, ".") {
			return false
		}
	}
	return true
}

// encodedSlashes reads each encoded slash or backslash as a slash.
var encodedSlashes = strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", "/", "%5c", "/")

// hasEncodedSlash reports whether p holds %2F or %5C, in either case.
func hasEncodedSlash(p string) bool {
	for i := 0; i+2 < len(p); i++ {
		if p[i] == '%' && (p[i+1] == '2' && (p[i+2] == 'f' || p[i+2] == 'F') || p[i+1] == '5' && (p[i+2] == 'c' || p[i+2] == 'C')) {
			return true
		}
	}
	return false
}

// foldPath lowers the ASCII letters of p but for its percent-encodings,
// which decodeUnreserved left in upper case.
func foldPath(p string) string {
	b := []byte(p)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '%' && i+2 < len(b) && isHex(b[i+1]) && isHex(b[i+2]):
			i += 2
		case 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
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
