package redistest

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback in front of a server, for faults: it
// delays what the server sends back (SetLatency), and it cuts every
// connection and refuses new ones (Cut) until Restore.
type Proxy struct {
	// Addr is where clients connect.
	Addr    string
	target  string
	ln      net.Listener
	latency atomic.Int64 // ns added to every chunk the server sends
	// accepted counts the connections clients made to the proxy: their
	// dials of the server behind it.
	accepted atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cut    bool
	closed bool
	wg     sync.WaitGroup
}

// StartProxy runs a proxy to target on a free port of Host(), closed when
// the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return StartProxyAt(t, FreeAddr(t, Host()), target)
}

// StartProxyAt runs a proxy listening on addr. The target need not be up
// yet: connections made before it is are closed at once.
func StartProxyAt(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy listen on %s: %v", addr, err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// SetLatency delays every chunk the server sends back by d (0 removes the
// delay). Chunks keep their order, and pipelined replies are not delayed
// one after another: each arrives d after the server sent it.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Cut closes every connection through the proxy and refuses new ones until
// Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore accepts connections again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Conns is the number of open connections through the proxy, counting
// both sides of each.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted is the number of connections clients made to the proxy, cut
// ones included: how often they dialled the server behind it.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c, or returns false when the proxy is cut or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		if !p.track(client) {
			_ = client.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
		done <- struct{}{}
	}()
	go func() {
		p.delayedCopy(client, server)
		_ = client.Close()
		done <- struct{}{}
	}()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// chunk is data read from the server at a time.
type chunk struct {
	data []byte
	at   time.Time
}

// delayedCopy copies src to dst, each chunk once the latency set when it
// was read has passed.
func (p *Proxy) delayedCopy(dst io.Writer, src io.Reader) {
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{data: buf[:n], at: time.Now().Add(time.Duration(p.latency.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	failed := false
	for c := range chunks {
		if failed {
			continue // drain until the reader stops
		}
		if d := time.Until(c.at); d > 0 {
			t.Reset(d)
			<-t.C // the injected latency itself
		}
		if _, err := dst.Write(c.data); err != nil {
			failed = true
			if closer, ok := src.(io.Closer); ok && !errors.Is(err, io.EOF) {
				_ = closer.Close()
			}
		}
	}
}
