package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Outbound network for a job: its network namespace (bwrap's) gets a tap device
// served by slirp4netns, a user-mode TCP/IP stack (the one rootless Podman and Docker
// use) that makes the job's connections as ordinary sockets of the host. Before the
// job runs:
//   - slirp4netns runs with --disable-host-loopback (10.0.2.2 does not reach the
//     host's 127.0.0.1), and sandboxes itself (--enable-sandbox, --enable-seccomp);
//   - the job's namespace gets a "prohibit" route for every denied range (the host's
//     own addresses, the private and internal ranges, and the configured ones), so a
//     connection there fails at once with EACCES; the job cannot change its routes
//     (it has no capabilities and cannot make a user namespace);
//   - IPv4 only (no IPv6 route), DNS through slirp4netns's forwarder at 10.0.2.3.
// bwrap holds the job (--block-fd) until this is done; its --info-fd names the
// namespace's process.

// DefaultDeny are the deny list's defaults: the host's own addresses and the ranges
// no public service lives in.
const DefaultDeny = "host,private"

// privateRanges is what "private" stands for.
var privateRanges = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
}

// ParseDeny reads a deny list: CIDRs or addresses, "host" (the runner host's own
// addresses, read at each job's start) and "private" (privateRanges), comma-separated.
func ParseDeny(s string) (prefixes []netip.Prefix, host bool, err error) {
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		switch item {
		case "":
			continue
		case "host":
			host = true
			continue
		case "private":
			for _, r := range privateRanges {
				prefixes = append(prefixes, netip.MustParsePrefix(r))
			}
			continue
		}
		p, perr := netip.ParsePrefix(item)
		if perr != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return nil, false, fmt.Errorf("%q is neither a CIDR, an address, host nor private", item)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return nil, false, fmt.Errorf("%q: only IPv4 ranges (jobs have no IPv6 route at all)", item)
		}
		prefixes = append(prefixes, p.Masked())
	}
	return prefixes, host, nil
}

// netTools are the programs outbound network needs; err says why it cannot be had.
type netTools struct {
	slirp, nsenter, ip string
	resolv             string // the job's /etc/resolv.conf
	err                error
}

func findNetTools() netTools {
	var t netTools
	var missing []string
	for _, p := range []struct {
		name, pkg string
		dst       *string
	}{{"slirp4netns", "slirp4netns", &t.slirp}, {"nsenter", "util-linux", &t.nsenter}, {"ip", "iproute2", &t.ip}} {
		path, err := exec.LookPath(p.name)
		if err != nil {
			missing = append(missing, p.name+" ("+p.pkg+")")
		}
		*p.dst = path
	}
	if len(missing) > 0 {
		t.err = fmt.Errorf("outbound network for jobs needs %s: not installed", strings.Join(missing, ", "))
		return t
	}
	dir, err := os.MkdirTemp("", "hero-sandbox-net-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		t.resolv = filepath.Join(dir, "resolv.conf")
		err = os.WriteFile(t.resolv, []byte("nameserver 10.0.2.3\n"), 0o644)
	}
	if err != nil {
		t.err = fmt.Errorf("outbound network for jobs: cannot write the jobs' resolv.conf: %v", err)
	}
	return t
}

// jobNet is one job's network set-up.
type jobNet struct {
	infoR, infoW   *os.File // bwrap's --info-fd (fd 3 in the job's first process)
	blockR, blockW *os.File // bwrap's --block-fd (fd 4)
	slirp          *exec.Cmd
	slirpExit      *os.File // closing it ends slirp4netns (--exit-fd)
}

func newJobNet() (*jobNet, error) {
	n := &jobNet{}
	var err error
	if n.infoR, n.infoW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if n.blockR, n.blockW, err = os.Pipe(); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

func (n *jobNet) files() []*os.File { return []*os.File{n.infoW, n.blockR} }

func (n *jobNet) close() {
	for _, f := range []*os.File{n.infoR, n.infoW, n.blockR, n.blockW, n.slirpExit} {
		if f != nil {
			_ = f.Close()
		}
	}
	if n.slirp != nil && n.slirp.Process != nil {
		_ = n.slirp.Process.Kill()
		_ = n.slirp.Wait()
		n.slirp = nil
	}
}

const netSetupTimeout = 10 * time.Second

// start runs once the job's first process (bwrap) runs: it finds the job's namespace,
// serves it with slirp4netns, denies the ranges, then (after ready) lets the job go.
func (n *jobNet) start(t netTools, deny []netip.Prefix, denyHost bool, ready func(pid int)) error {
	// The child has its own copies; the parent's write end of info must go for EOF.
	_ = n.infoW.Close()
	_ = n.blockR.Close()
	n.infoW, n.blockR = nil, nil
	pid, err := readChildPid(n.infoR)
	if err != nil {
		return err
	}
	if err := waitLoopback(pid, time.Now().Add(netSetupTimeout)); err != nil {
		return err
	}
	nsPath := fmt.Sprintf("/proc/%d/ns/net", pid)
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer func() { _ = readyR.Close() }()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		_ = readyW.Close()
		return err
	}
	n.slirpExit = exitW
	args := []string{"--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox", "--enable-seccomp",
		"--ready-fd=3", "--exit-fd=4", "--netns-type=path"}
	if os.Geteuid() != 0 {
		args = append(args, fmt.Sprintf("--userns-path=/proc/%d/ns/user", pid))
	}
	n.slirp = exec.Command(t.slirp, append(args, nsPath, "tap0")...)
	n.slirp.ExtraFiles = []*os.File{readyW, exitR}
	n.slirp.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	var slirpOut strings.Builder
	n.slirp.Stdout, n.slirp.Stderr = &slirpOut, &slirpOut
	err = n.slirp.Start()
	_ = readyW.Close()
	_ = exitR.Close()
	if err != nil {
		n.slirp = nil
		return fmt.Errorf("start slirp4netns: %v", err)
	}
	_ = readyR.SetReadDeadline(time.Now().Add(netSetupTimeout))
	if _, err := readyR.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("slirp4netns did not get ready: %v (%s)", err, strings.TrimSpace(slirpOut.String()))
	}
	if denyHost {
		deny = append(deny, hostAddrs()...)
	}
	var batch strings.Builder
	for _, p := range deny {
		fmt.Fprintf(&batch, "route add prohibit %s\n", p)
	}
	ns := []string{"--net=" + nsPath}
	if os.Geteuid() != 0 {
		ns = append(ns, fmt.Sprintf("--user=/proc/%d/ns/user", pid), "--preserve-credentials")
	}
	cmd := exec.Command(t.nsenter, append(ns, "--", t.ip, "-force", "-batch", "-")...)
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("deny routes in the job's network: %v (%s)", err, strings.TrimSpace(string(out)))
	}
	ready(pid)
	if _, err := n.blockW.Write([]byte{'1'}); err != nil {
		return fmt.Errorf("release the job: %v", err)
	}
	_ = n.blockW.Close()
	n.blockW = nil
	return nil
}

// waitLoopback waits until bwrap's child (pid) has set up its namespace's loopback:
// bwrap names the child (--info-fd) before the child adds 127.0.0.1 to lo, exclusively,
// and slirp4netns's --configure brings lo up, which adds that address too — started
// first, it made bwrap exit ("loopback: Failed RTM_NEWADDR") and the job never start.
// The address shows in the namespace's local routes (/proc/<pid>/net/fib_trie). The
// kernel tells only a netlink socket inside the namespace of it, so this looks, at
// growing intervals (the child gets there within milliseconds of its start, as a
// started executor's socket does: lib/rrq waits for that one the same way).
func waitLoopback(pid int, deadline time.Time) error {
	path := fmt.Sprintf("/proc/%d/net/fib_trie", pid)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("the job's network namespace: %v", err)
		}
		if strings.Contains(string(b), "127.0.0.1") {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the sandbox did not set up its loopback interface")
		}
		time.Sleep(wait)
	}
}

// readChildPid reads bwrap's --info-fd JSON for the sandbox's process.
func readChildPid(f *os.File) (int, error) {
	_ = f.SetReadDeadline(time.Now().Add(netSetupTimeout))
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(bufio.NewReader(f)).Decode(&info); err != nil {
		return 0, fmt.Errorf("bwrap's sandbox info: %v", err)
	}
	if info.ChildPid <= 0 {
		return 0, errors.New("bwrap's sandbox info names no process")
	}
	return info.ChildPid, nil
}

// hostAddrs are this host's own IPv4 addresses (every interface).
func hostAddrs() []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() {
				out = append(out, netip.PrefixFrom(ip.Unmap(), 32))
			}
		}
	}
	return out
}
