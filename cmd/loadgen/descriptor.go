package main

import (
	"fmt"
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// template is a parsed --descriptor: descriptors separated by ';', entries
// by ',', each entry key=value, where every %d in a value is replaced by the
// key index.
type template struct {
	descs [][]entryTemplate
}

type entryTemplate struct {
	key   string
	parts []string // value split on "%d"; one part means a constant value
}

func parseTemplate(s string) (*template, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--descriptor is empty")
	}
	t := &template{}
	for _, d := range strings.Split(s, ";") {
		var entries []entryTemplate
		seen := map[string]bool{}
		for _, e := range strings.Split(d, ",") {
			k, v, ok := strings.Cut(e, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" || v == "" {
				return nil, fmt.Errorf("--descriptor %q: entry %q is not key=value", s, e)
			}
			if seen[k] {
				return nil, fmt.Errorf("--descriptor %q: key %q appears twice in one descriptor", s, k)
			}
			seen[k] = true
			entries = append(entries, entryTemplate{key: k, parts: strings.Split(v, "%d")})
		}
		if len(entries) > 16 {
			return nil, fmt.Errorf("--descriptor %q: more than 16 entries in one descriptor", s)
		}
		t.descs = append(t.descs, entries)
	}
	if len(t.descs) > 16 {
		return nil, fmt.Errorf("--descriptor %q: more than 16 descriptors", s)
	}
	return t, nil
}

// varies reports whether any value depends on the key index.
func (t *template) varies() bool {
	for _, d := range t.descs {
		for _, e := range d {
			if len(e.parts) > 1 {
				return true
			}
		}
	}
	return false
}

// requestBuilder owns one reusable request. gRPC marshals the request before
// Invoke returns and keeps no reference to it, so one goroutine may refill
// and resend the same request; this keeps the load generator's own CPU (it
// shares the cores with the server) down to one string per templated entry.
type requestBuilder struct {
	t       *template
	req     *rlsv3.RateLimitRequest
	entries [][]*rlv3.RateLimitDescriptor_Entry
	buf     []byte
}

func newRequestBuilder(t *template, domain string, hits uint32) *requestBuilder {
	b := &requestBuilder{t: t, req: &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}}
	for _, d := range t.descs {
		es := make([]*rlv3.RateLimitDescriptor_Entry, len(d))
		for i, e := range d {
			es[i] = &rlv3.RateLimitDescriptor_Entry{Key: e.key, Value: strings.Join(e.parts, "%d")}
		}
		b.entries = append(b.entries, es)
		b.req.Descriptors = append(b.req.Descriptors, &rlv3.RateLimitDescriptor{Entries: es})
	}
	return b
}

// build fills the request for key index k and returns it.
func (b *requestBuilder) build(k int) *rlsv3.RateLimitRequest {
	for di, d := range b.t.descs {
		for ei, e := range d {
			if len(e.parts) == 1 {
				continue
			}
			b.buf = b.buf[:0]
			for i, p := range e.parts {
				if i > 0 {
					b.buf = strconv.AppendInt(b.buf, int64(k), 10)
				}
				b.buf = append(b.buf, p...)
			}
			b.entries[di][ei].Value = string(b.buf)
		}
	}
	return b.req
}
