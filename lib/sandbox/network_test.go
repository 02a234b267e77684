package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// newNetSandbox is a sandbox whose jobs may have outbound network, denying deny.
func newNetSandbox(t *testing.T, deny string) *Sandbox {
	t.Helper()
	s := newSandbox(t)
	if s.net.err != nil {
		if os.Geteuid() != 0 {
			t.Skip(s.net.err)
		}
		t.Fatal(s.net.err) // as root (CI) the tools must be there: make deps installs them
	}
	prefixes, host, err := ParseDeny(deny)
	if err != nil {
		t.Fatal(err)
	}
	s, err = New(context.Background(), Options{UID: 61000, GID: 61000, NetDeny: prefixes, NetDenyHost: host, NeedNetwork: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve listens on every address of the host (as a careless service would) and
// greets whoever connects; it returns the port and one of the host's own
// non-loopback IPv4 addresses.
func serve(t *testing.T) (port int, hostIP string) {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello\n"))
			_ = c.Close()
		}
	}()
	for _, p := range hostAddrs() {
		if !p.Addr().IsLoopback() {
			hostIP = p.Addr().String()
			break
		}
	}
	if hostIP == "" {
		t.Skip("this host has no non-loopback IPv4 address")
	}
	return ln.Addr().(*net.TCPAddr).Port, hostIP
}

// connect is a job's script line: it prints TAG-ok and the greeting when addr
// answers, TAG-refused otherwise (with the reason on stderr).
func connect(tag, addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s && echo %s-ok $(head -n1 <&3)' || echo %s-refused\n", host, port, tag, tag)
}

// Outbound network (slirp4netns): a job reaches the world, but not the host (its
// own addresses, its loopback through the gateway) nor the denied ranges; without
// network it has no interface but lo.
func TestOutboundNetwork(t *testing.T) {
	port, hostIP := serve(t)
	svc := net.JoinHostPort(hostIP, fmt.Sprint(port))
	script := "grep -q tap0 /proc/net/dev && echo has-tap\ncat /etc/resolv.conf\n" +
		connect("host", svc) + connect("gateway", net.JoinHostPort("10.0.2.2", fmt.Sprint(port))) +
		connect("denied", "198.51.100.1:80")

	out, res, _ := run(t, newNetSandbox(t, DefaultDeny+",198.51.100.0/24"), script, nil, Limits{Network: "outbound"})
	if res.ExitCode != 0 {
		t.Fatalf("%+v\n%s", res, out)
	}
	for _, want := range []string{"has-tap", "nameserver 10.0.2.3", "host-refused", "gateway-refused", "denied-refused"} {
		if !lineWith(out, want) {
			t.Errorf("with the default deny list, want %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "Permission denied") {
		t.Errorf("a denied range should fail at once by its route (EACCES):\n%s", out)
	}

	// The control: with the host's addresses not denied, the same job reaches the
	// service — what blocked it above was the deny list, and the network works.
	out, _, _ = run(t, newNetSandbox(t, "198.51.100.0/24"), script, nil, Limits{Network: "outbound"})
	if !lineWith(out, "host-ok hello") || !lineWith(out, "gateway-refused") {
		t.Errorf("without host in the deny list the job should reach %s (and still not the host's loopback):\n%s", svc, out)
	}

	// No network: no interface but lo, whatever the sandbox could do.
	out, _, _ = run(t, newNetSandbox(t, DefaultDeny), script, nil, Limits{})
	if lineWith(out, "has-tap") || !lineWith(out, "host-refused") {
		t.Errorf("a job without network:\n%s", out)
	}
}

func lineWith(out, prefix string) bool {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return true
		}
	}
	return false
}

// The network set-up waits for the sandbox's own loopback before it starts
// slirp4netns (whose --configure brings lo up, which made bwrap's exclusive add of
// 127.0.0.1 fail when it came first): not ready while the namespace's lo has no
// address, ready once it has.
func TestWaitLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace of its own")
	}
	// The holder says "in" from inside its new namespace, then keeps it.
	holder := exec.Command("unshare", "--net", "sh", "-c", "echo in; exec sleep 30")
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Skip("unshare:", err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "in\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	pid := holder.Process.Pid
	if err := waitLoopback(pid, time.Now().Add(50*time.Millisecond)); err == nil {
		t.Fatal("ready before the namespace's loopback has its address")
	}
	add := exec.Command("nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", pid), "ip", "addr", "add", "127.0.0.1/8", "dev", "lo")
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ip addr add: %v %s", err, out)
	}
	if err := waitLoopback(pid, time.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("not ready with the address: %v", err)
	}
}
