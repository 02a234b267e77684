package rrq

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An executor that accepts one connection at a time, run without Connections 1, takes
// the pool's first connection and leaves every other one in its listen backlog: the
// kernel accepts a connection on the executor's behalf, so a request written there
// waits, unread, for as long as the first connection stays open (for ever, as the
// pool keeps its connections). The pool tells such an executor apart at each start,
// from the kernel's socket queues: no connection is spent only on a probe (an executor
// may serve one connection and exit when it closes), and nothing is sent that runs a
// handler.

// connectionCheckJob is the job id of the cancel frames of the start's check: a cancel
// for a job that runs nothing is a no-op (protocol §3).
const connectionCheckJob = "rrq-connection-check"

// readState is what the kernel tells of the bytes written on a connection.
type readState int

const (
	readUnknown readState = iota // the kernel cannot tell (another network namespace)
	readYes                      // the executor has read them
	readNo                       // not within the time given
)

// checkSecondConnection makes sure that a process serves a second connection while its
// first one (first, the connection that found it accepting) is open: a no-op cancel
// frame on first, which the process must read within the start-up limit (deadline),
// then one on a second connection, which it must read within AcceptWait. A process
// that refuses the second connection or leaves it unread fails its start with
// ErrOneConnection. The second connection is closed; first goes on to carry requests.
func (pr *proc) checkSecondConnection(first net.Conn, g *generation, deadline time.Time) error {
	p := pr.p
	if err := writeNoopCancel(first, deadline); err != nil {
		return fmt.Errorf("process %d (pid %d): write on its first connection: %w", pr.index, g.pid, err)
	}
	st, err := pr.waitRead(first, g, deadline)
	if err != nil || st == readUnknown {
		return err
	}
	if st == readNo {
		return fmt.Errorf("process %d (pid %d) did not accept connections on %s within %v: it read nothing of its first connection", pr.index, g.pid, pr.ep, p.cfg.StartupTimeout)
	}
	end := time.Now().Add(p.cfg.AcceptWait)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	second, err := pr.ep.Dial(ctx, &net.Dialer{})
	if err == nil {
		defer second.Close()
		err = writeNoopCancel(second, end)
	}
	if err != nil {
		if g.hasExited() {
			return fmt.Errorf("process %d (pid %d) exited during startup: %s", pr.index, g.pid, exitDesc(g.exitErr))
		}
		return fmt.Errorf("%w: process %d (pid %d) refused a second connection on %s while its first was open: %v", ErrOneConnection, pr.index, g.pid, pr.ep, err)
	}
	if st, err = pr.waitRead(second, g, end); err != nil {
		return err
	}
	if st == readNo {
		return fmt.Errorf("%w: process %d (pid %d) did not read a second connection on %s within %v while its first was open", ErrOneConnection, pr.index, g.pid, pr.ep, p.cfg.AcceptWait)
	}
	return nil
}

// writeNoopCancel writes a cancel frame for no job on c.
func writeNoopCancel(c net.Conn, deadline time.Time) error {
	if err := c.SetWriteDeadline(deadline); err != nil {
		return err
	}
	if err := WriteMessage(c, &CancelRequest{ProtocolVersion: ProtocolVersion, JobID: connectionCheckJob}); err != nil {
		return err
	}
	return c.SetWriteDeadline(time.Time{})
}

// waitRead waits until the process has read everything written on c, its exit, the
// pool's close or the deadline.
func (pr *proc) waitRead(c net.Conn, g *generation, deadline time.Time) (readState, error) {
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		n, known := unread(c)
		switch {
		case !known:
			return readUnknown, nil
		case n == 0:
			return readYes, nil
		case !time.Now().Before(deadline):
			return readNo, nil
		}
		t := time.NewTimer(min(wait, time.Until(deadline)))
		select {
		case <-t.C:
		case <-g.exited:
			t.Stop()
			return readNo, fmt.Errorf("process %d (pid %d) exited during startup: %s", pr.index, g.pid, exitDesc(g.exitErr))
		case <-pr.p.closing:
			t.Stop()
			return readNo, fmt.Errorf("%w: pool %s", ErrClosed, pr.p.cfg.Name)
		}
	}
}

// unread is how many bytes written on c the peer has not read yet, when the kernel can
// tell: on a Unix socket, what the sender's buffer still holds (SIOCOUTQ: a message
// leaves it when the receiver reads it); on TCP, what is not acknowledged yet plus
// what waits in the peer socket's receive queue (/proc/net/tcp: the executor listens
// on loopback in this network namespace).
func unread(c net.Conn) (int, bool) {
	switch c := c.(type) {
	case *net.UnixConn:
		n, err := outQueue(c)
		return n, err == nil
	case *net.TCPConn:
		n, err := outQueue(c)
		if err != nil {
			return 0, false
		}
		if n > 0 {
			return n, true
		}
		return tcpPeerUnread(c.LocalAddr(), c.RemoteAddr())
	}
	return 0, false
}

// outQueue is the socket's SIOCOUTQ.
func outQueue(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		return 0, err
	}
	return n, ierr
}

// tcpPeerUnread is the receive queue of the peer socket of the TCP connection from
// local to remote, from /proc/net/tcp (tcp6): the established socket whose local port
// is remote's and whose remote port is local's.
func tcpPeerUnread(local, remote net.Addr) (int, bool) {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, false
	}
	file := "/proc/net/tcp"
	if r.IP.To4() == nil {
		file = "/proc/net/tcp6"
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", r.Port)
	peer := fmt.Sprintf(":%04X", l.Port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue …
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 || fs[3] != "01" || !strings.HasSuffix(fs[1], want) || !strings.HasSuffix(fs[2], peer) {
			continue
		}
		_, rx, ok := strings.Cut(fs[4], ":")
		n, err := strconv.ParseUint(rx, 16, 32)
		if !ok || err != nil {
			return 0, false
		}
		return int(n), true
	}
	return 0, false
}
