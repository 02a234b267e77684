package rrq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Endpoint is where one executor process listens: a Unix socket path or a localhost TCP
// host:port.
type Endpoint struct {
	Network string // "unix" or "tcp"
	Address string // the socket path, or host:port with a loopback host
}

// UnixEndpoint is the endpoint of an executor listening on the Unix socket at path.
func UnixEndpoint(path string) Endpoint { return Endpoint{Network: "unix", Address: path} }

// TCPEndpoint is the endpoint of an executor listening on the localhost TCP address
// hostPort (e.g. "127.0.0.1:7001").
func TCPEndpoint(hostPort string) Endpoint { return Endpoint{Network: "tcp", Address: hostPort} }

// String returns "unix:<path>" or "tcp:<host:port>".
func (e Endpoint) String() string { return e.Network + ":" + e.Address }

// Validate checks the network and that a TCP address is localhost-only, as the protocol
// requires.
func (e Endpoint) Validate() error {
	switch e.Network {
	case "unix":
		if e.Address == "" {
			return errors.New("rrq: empty Unix socket path")
		}
		return nil
	case "tcp":
		return ValidateLocalTCPAddress(e.Address)
	default:
		return fmt.Errorf("rrq: unsupported endpoint network %q (want unix or tcp)", e.Network)
	}
}

// Dial connects to e. A Unix socket is reached without following a symbolic link at
// its path: the executor that made it writes that directory, and could leave a link
// to another socket there (another context's executor, a service's) for its
// requests to go to. It is opened as a path only (O_PATH|O_NOFOLLOW: a link is opened
// as itself), checked to be a socket, and connected to through /proc/self/fd.
func (e Endpoint) Dial(ctx context.Context, d *net.Dialer) (net.Conn, error) {
	if e.Network != "unix" {
		return d.DialContext(ctx, e.Network, e.Address)
	}
	fd, err := unix.Open(e.Address, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: &os.PathError{Op: "open", Path: e.Address, Err: err}}
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
	case unix.S_IFLNK:
		return nil, fmt.Errorf("rrq: %s is not a socket (a symbolic link)", e.Address)
	default:
		return nil, fmt.Errorf("rrq: %s is not a socket", e.Address)
	}
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

// Env returns the environment variable (NAME=value) that tells an executor to listen on e.
func (e Endpoint) Env() string {
	if e.Network == "unix" {
		return EnvSocket + "=" + e.Address
	}
	return EnvTCPSocket + "=" + e.Address
}

// ValidateLocalTCPAddress checks that hostPort is host:port with a loopback host
// ("localhost", 127.0.0.0/8 or ::1) and a port in 1..65535.
func ValidateLocalTCPAddress(hostPort string) error {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("rrq: bad TCP address %q: %w", hostPort, err)
	}
	if p, err := netip.ParseAddrPort("127.0.0.1:" + port); err != nil || p.Port() == 0 {
		return fmt.Errorf("rrq: bad port in TCP address %q", hostPort)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.IsLoopback() {
		return fmt.Errorf("rrq: TCP address %q is not localhost-only", hostPort)
	}
	return nil
}

// EndpointFromEnv reads the executor's endpoint from RRQ_EXECUTOR_SOCKET or
// RRQ_EXECUTOR_TCP_SOCKET through getenv (os.Getenv, typically). Exactly one must be set.
func EndpointFromEnv(getenv func(string) string) (Endpoint, error) {
	sock, tcp := getenv(EnvSocket), getenv(EnvTCPSocket)
	var e Endpoint
	switch {
	case sock != "" && tcp != "":
		return e, fmt.Errorf("rrq: both %s and %s are set", EnvSocket, EnvTCPSocket)
	case sock != "":
		e = UnixEndpoint(sock)
	case tcp != "":
		e = TCPEndpoint(tcp)
	default:
		return e, fmt.Errorf("rrq: neither %s nor %s is set", EnvSocket, EnvTCPSocket)
	}
	return e, e.Validate()
}
