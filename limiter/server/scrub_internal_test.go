package server

import (
	"bytes"
	"testing"
)

// scrub replaces control bytes in request heads only, whatever the reads'
// sizes: a body passes as sent (by Content-Length), and after a chunked
// body the rest of the connection does.
func TestScrubHeadsOnly(t *testing.T) {
	in := "\r\nPOST /c HTTP/1.1\r\nX-A: a\x01b\x7f\r\nContent-Length: 6\r\n\r\n\x01\x02\x7f\r\n\n" +
		"GET /f HTTP/1.1\r\nX-B: \x00\tc\r\nX \x01B\x80: v\r\n\r\n" +
		"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\x01\r\n0\r\n\r\n" +
		"GET /f HTTP/1.1\r\nX-C: \x01\r\n\r\n"
	want := "\r\nPOST /c HTTP/1.1\r\nX-A: a\xffb\xff\r\nContent-Length: 6\r\n\r\n\x01\x02\x7f\r\n\n" +
		"GET /f HTTP/1.1\r\nX-B: \xff\tc\r\nX~~B~: v\r\n\r\n" +
		"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\x01\r\n0\r\n\r\n" +
		"GET /f HTTP/1.1\r\nX-C: \x01\r\n\r\n"
	for _, size := range []int{1, 2, 3, 7, 64, len(in)} {
		c := &scrubConn{}
		got := []byte(in)
		for i := 0; i < len(got); i += size {
			c.scrub(got[i:min(i+size, len(got))])
		}
		if !bytes.Equal(got, []byte(want)) {
			t.Errorf("reads of %d bytes:\n got %q\nwant %q", size, got, want)
		}
	}
}

// A Content-Length that can't be followed (two of them, or not a number)
// leaves the rest of the connection as sent: Go's parser refuses it.
func TestScrubUnfollowableLength(t *testing.T) {
	for _, head := range []string{
		"POST /c HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"POST /c HTTP/1.1\r\nContent-Length: x\r\n\r\n",
	} {
		c := &scrubConn{}
		got := []byte(head + "\x01GET / HTTP/1.1\r\nX: \x01\r\n\r\n")
		c.scrub(got)
		if !bytes.HasSuffix(got, []byte("X: \x01\r\n\r\n")) {
			t.Errorf("%q: %q, want the rest as sent", head, got)
		}
	}
}
