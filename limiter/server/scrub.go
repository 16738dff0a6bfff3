package server

import (
	"bytes"
	"net"
	"strconv"
	"strings"
)

// Go's HTTP server answers 400, before any handler runs, a request whose
// header block holds a control byte (0x00-0x1f but HTAB, and 0x7f). A proxy
// in front passes such a byte in any client header to its auth subrequest
// (nginx does), and a proxy that fails open on the limiter's errors
// (nginx's auth_request turns a 400 into a 500) would let one junk header
// skip every limit of the request. So the data plane's connections go
// through scrubListener: in each request's head, every control byte is
// replaced with 0xff, which Go's parser takes (obs-text). A header the
// limiter doesn't read then changes nothing; one it reads holds a value
// that is not UTF-8, which the service refuses (a denial with its reason).
// Bodies (by Content-Length) pass as sent; after a chunked body the rest of
// the connection does, since only apps send those, and the JSON they send
// is refused by its own decoder.

// scrubListener wraps each accepted connection in a scrubConn.
type scrubListener struct{ net.Listener }

func (l scrubListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &scrubConn{Conn: c}, nil
}

// scrubConn replaces the control bytes of each request head it reads.
type scrubConn struct {
	net.Conn
	body     int64 // bytes of the current body left to pass as sent
	passAll  bool  // framing not followed (chunked): the rest as sent
	lines    int   // lines of the current head seen so far
	lineLen  int   // bytes of the current line so far, but CR
	valued   bool  // the current header line's colon was seen
	line     [maxScrubLine]byte
	chunked  bool  // the current head says Transfer-Encoding
	length   int64 // the current head's Content-Length, -1 for none
	lengthOK bool  // length parsed, and not seen twice
}

// maxScrubLine is how much of a header line scrubConn keeps to find the
// framing headers: enough for "Content-Length: " and any length.
const maxScrubLine = 64

func (c *scrubConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scrub(p[:n])
	return n, err
}

// scrub rewrites b, the next bytes of the stream, in place.
func (c *scrubConn) scrub(b []byte) {
	for i := 0; i < len(b); i++ {
		switch {
		case c.passAll:
			return
		case c.body > 0:
			skip := min(int64(len(b)-i), c.body)
			c.body -= skip
			i += int(skip) - 1
		default:
			c.headByte(&b[i])
		}
	}
}

// headByte takes one byte of a request head, replacing it when Go's parser
// would refuse it.
func (c *scrubConn) headByte(p *byte) {
	switch b := *p; {
	case b == '\n':
		c.endLine()
	case b == '\r':
		// Part of a line's end; a bare CR is left for Go to refuse (a
		// proxy refuses it first: nginx answers 400 itself).
	case c.lines > 0 && c.inName(b):
		if !isTokenByte(b) {
			// Go refuses the name; nginx drops such a header itself.
			*p, b = '~', '~'
		}
		c.keep(b)
	default:
		if b < 0x20 && b != '\t' || b == 0x7f {
			*p, b = 0xff, 0xff
		}
		c.keep(b)
	}
}

// keep notes b, the next byte of the current line.
func (c *scrubConn) keep(b byte) {
	if c.lineLen < len(c.line) {
		c.line[c.lineLen] = b
	}
	c.lineLen++
}

// endLine ends the current line of a head: a header line is looked at for
// the body's framing, an empty one ends the head.
func (c *scrubConn) endLine() {
	line := c.line[:min(c.lineLen, len(c.line))]
	c.lineLen, c.valued = 0, false
	if len(line) > 0 {
		if c.lines == 0 {
			c.length, c.lengthOK, c.chunked = -1, true, false
		} else {
			c.framing(line)
		}
		c.lines++
		return
	}
	if c.lines == 0 {
		return // an empty line before a request line, which Go skips
	}
	c.lines = 0
	switch {
	case c.chunked || !c.lengthOK:
		c.passAll = true
	case c.length > 0:
		c.body = c.length
	}
}

// framing notes what a header line says of the body's length.
func (c *scrubConn) framing(line []byte) {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return
	}
	switch {
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		c.chunked = true
	case bytes.EqualFold(name, []byte("Content-Length")):
		n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil || n < 0 || c.length >= 0 {
			c.lengthOK = false // Go refuses it, or we can't follow
			return
		}
		c.length = n
	}
}

// inName reports whether b, the next byte of a header line, is part of
// the header's name; the colon ends it.
func (c *scrubConn) inName(b byte) bool {
	if c.valued {
		return false
	}
	if b == ':' && c.lineLen > 0 {
		c.valued = true
		return false
	}
	return true
}

// isTokenByte reports whether b may be part of a header name (RFC 9110's
// tchar).
func isTokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}
