package gateway

import (
	"net"
	"sync"
)

// limitListener accepts at most max connections open at once
// (http.max_connections): past it Accept waits until one closes, and new
// connections wait in the kernel's accept queue. Idle keep-alives count:
// http.idle_timeout closes them.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	close sync.Once
}

func newLimitListener(ln net.Listener, maxConns int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, maxConns), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// slotConn gives its slot back when it is closed (once).
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
