package testutil

import (
	"net"
	"sync"
	"testing"
)

// Blackhole is a TCP proxy to one address that can stop forwarding — the
// sockets stay open and nothing passes — as a cut network link does: the
// process behind it believes it is connected.
type Blackhole struct {
	ln net.Listener
	to string

	mu    sync.Mutex
	open  chan struct{} // closed while forwarding; a new one while cut
	conns []net.Conn
}

// StartBlackhole proxies to the address to until the test ends.
func StartBlackhole(t testing.TB, to string) *Blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &Blackhole{ln: ln, to: to, open: make(chan struct{})}
	close(b.open)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

// URL is the NATS URL through the proxy.
func (b *Blackhole) URL() string { return "nats://" + b.ln.Addr().String() }

func (b *Blackhole) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", b.to)
		if err != nil {
			_ = c.Close() // nothing to forward to; how it closes does not matter
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, c, up)
		b.mu.Unlock()
		go b.pipe(up, c)
		go b.pipe(c, up)
	}
}

// pipe forwards src to dst, holding every read while the link is cut.
func (b *Blackhole) pipe(dst, src net.Conn) {
	// The other direction ends too: a close error says nothing more.
	defer func() { _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b.mu.Lock()
			open := b.open
			b.mu.Unlock()
			<-open
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut stops forwarding; Mend resumes it.
func (b *Blackhole) Cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.open:
		b.open = make(chan struct{})
	default:
	}
}

func (b *Blackhole) Mend() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.open:
	default:
		close(b.open)
	}
}

func (b *Blackhole) close() {
	b.Mend()
	// Torn down at the end of a test: close errors change nothing.
	_ = b.ln.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
}
