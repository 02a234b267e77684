package sandbox

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/bytesize"
	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/model"
)

// Config is the command line of the sandbox (the runner's flags).
type Config struct {
	Mode     string
	UID, GID int
	Binds    string // comma-separated host paths jobs may read and write (shared scratch)
	Memory   string // per-job limits: sizes like 512MiB, 2GiB; "" or 0: none
	Pids     int
	CPU      int // thousandths of a CPU
	FileSize string
	Disk     string
	// The most a job may ask for: "" (the default) is the default above; 0 no
	// maximum of the runner's.
	MemoryMax, FileSizeMax, DiskMax string
	PidsMax, CPUMax                 string
	Network                         string        // the jobs' default network: none or outbound
	NetworkDeny                     string        // what outbound jobs cannot reach (ParseDeny)
	Ahead                           int           // sandboxes made ahead of need (AheadOptions.Max)
	AheadTTL                        time.Duration // AheadOptions.TTL
	Fork                            bool          // Options.Fork
	Zygote                          string        // Options.Zygote
	limits, max                     Limits
	binds                           []string
	deny                            []netip.Prefix
	denyHost                        bool
}

// RegisterFlags adds the --sandbox and --job-* flags.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	f.StringVar(&c.Mode, "sandbox", "", ModeBwrap, "how jobs run: bwrap (each job in its own bubblewrap sandbox: namespaces, no network, only system directories and its work directory) or none (explicitly unsandboxed: said at every start, in /readyz and in hero_runner_sandbox)")
	f.IntVar(&c.UID, "sandbox-uid", "", 61000, "when the runner is root, jobs run as this uid (no service's) outside their namespace; 0: the runner's")
	f.IntVar(&c.GID, "sandbox-gid", "", 61000, "the gid of --sandbox-uid")
	f.StringVar(&c.Binds, "sandbox-bind", "", "", "host directories every job may read and write (comma-separated), e.g. a shared scratch volume; none by default")
	f.StringVar(&c.Memory, "job-memory", "", "1GiB", "memory one job may use (its processes together; cgroup, else address space); 0: no limit")
	f.IntVar(&c.Pids, "job-pids", "", 512, "processes and threads one job may have at once; 0: no limit")
	f.IntVar(&c.CPU, "job-cpu", "", 0, "CPU one job may use, in thousandths of a CPU (1000: one CPU); 0: no limit")
	f.StringVar(&c.FileSize, "job-file-size", "", "1GiB", "largest file one job may write; 0: no limit")
	f.StringVar(&c.Disk, "job-disk", "", "1GiB", "the space one job's files may take: its work directory and /tmp are one filesystem of this size in its sandbox (a tmpfs: memory, charged to the job's memory limit where it has a cgroup); 0: no limit")
	f.StringVar(&c.MemoryMax, "job-memory-max", "", "", "the most memory a job or its context may ask for; empty: --job-memory (a job may ask for less, not more); 0: no maximum (contexts' job_max may still set one)")
	f.StringVar(&c.PidsMax, "job-pids-max", "", "", "the most processes a job or its context may ask for; empty: --job-pids; 0: no maximum")
	f.StringVar(&c.CPUMax, "job-cpu-max", "", "", "the most CPU (thousandths) a job or its context may ask for; empty: --job-cpu; 0: no maximum")
	f.StringVar(&c.FileSizeMax, "job-file-size-max", "", "", "the largest file size a job or its context may ask for; empty: --job-file-size; 0: no maximum")
	f.StringVar(&c.DiskMax, "job-disk-max", "", "", "the most disk space a job or its context may ask for; empty: --job-disk; 0: no maximum")
	f.StringVar(&c.Network, "job-network", "", "none", "jobs' network: none, or outbound (through slirp4netns: never the host, its loopback or --job-network-deny); a context's job_max (operators) can allow outbound where this is none")
	f.IntVar(&c.Ahead, "sandbox-ahead", "", 8, "sandboxes made ahead of need: up to this many, for the limits jobs asked for within --sandbox-ahead-ttl, each made before its job comes and used by that one job alone (a job without network); 0: each job's sandbox is made when it starts")
	f.BoolVar(&c.Fork, "sandbox-fork", "", true, "the sandboxes made ahead (--sandbox-ahead) are forking ones: each a long-lived bwrap sandbox whose first process, hero-zygote, forks one job after another into fresh PID, mount, IPC and UTS namespaces with a fresh /tmp (docs/security.md, \"The forking sandbox\"); false, or hero-zygote missing or not working here (said at the start): each job gets a bwrap sandbox of its own")
	f.StringVar(&c.Zygote, "sandbox-zygote", "", "", "the hero-zygote program of --sandbox-fork; empty: the one next to the runner's binary, else on PATH")
	f.DurationVar(&c.AheadTTL, "sandbox-ahead-ttl", "", time.Minute, "how long after the last job of some limits sandboxes are still made ahead for them (those made and not used are destroyed then)")
	f.StringVar(&c.NetworkDeny, "job-network-deny", "", DefaultDeny, "what jobs with outbound network cannot reach: IPv4 CIDRs, host (this host's own addresses) and private (RFC 1918, loopback, link-local, CGNAT, multicast), comma-separated")
}

// Validate checks the flags.
func (c *Config) Validate() error {
	if c.Mode != ModeBwrap && c.Mode != ModeNone {
		return fmt.Errorf("--sandbox %q: want bwrap or none", c.Mode)
	}
	if c.Pids < 0 || c.CPU < 0 || c.UID < 0 || c.GID < 0 {
		return fmt.Errorf("--job-pids, --job-cpu, --sandbox-uid and --sandbox-gid must not be negative")
	}
	if c.Ahead < 0 || c.Ahead > 1024 {
		return fmt.Errorf("--sandbox-ahead %d: want 0 to 1024", c.Ahead)
	}
	if c.AheadTTL <= 0 {
		return fmt.Errorf("--sandbox-ahead-ttl %s: want a positive duration", c.AheadTTL)
	}
	c.limits.Pids, c.limits.CPUMillis = c.Pids, c.CPU
	for _, l := range []struct {
		flag      string
		def, max  string
		dst, mdst *int64
	}{
		{"--job-memory", c.Memory, c.MemoryMax, &c.limits.MemoryBytes, &c.max.MemoryBytes},
		{"--job-file-size", c.FileSize, c.FileSizeMax, &c.limits.FileSizeBytes, &c.max.FileSizeBytes},
		{"--job-disk", c.Disk, c.DiskMax, &c.limits.DiskBytes, &c.max.DiskBytes},
	} {
		var err error
		if *l.dst, err = bytesize.Parse(l.def); err != nil {
			return fmt.Errorf("%s: %v", l.flag, err)
		}
		if *l.mdst, err = maximum(l.max, *l.dst, bytesize.Parse); err != nil {
			return fmt.Errorf("%s-max: %v", l.flag, err)
		}
	}
	var err error
	if c.max.Pids, err = maximumInt(c.PidsMax, c.Pids); err != nil {
		return fmt.Errorf("--job-pids-max: %v", err)
	}
	if c.max.CPUMillis, err = maximumInt(c.CPUMax, c.CPU); err != nil {
		return fmt.Errorf("--job-cpu-max: %v", err)
	}
	if c.Network == "" {
		c.Network = model.NetworkNone
	}
	if model.NetworkRank(c.Network) < 0 {
		return fmt.Errorf("--job-network %q: want none or outbound", c.Network)
	}
	c.limits.Network = c.Network
	if c.deny, c.denyHost, err = ParseDeny(c.NetworkDeny); err != nil {
		return fmt.Errorf("--job-network-deny: %v", err)
	}
	c.binds = nil
	for _, b := range strings.Split(c.Binds, ",") {
		if b = strings.TrimSpace(b); b != "" {
			if !strings.HasPrefix(b, "/") {
				return fmt.Errorf("--sandbox-bind %q: want an absolute path", b)
			}
			c.binds = append(c.binds, b)
		}
	}
	return nil
}

// maximum reads a --job-*-max flag: "" is the default def (a ceiling by default),
// else what parse reads (0: no maximum).
func maximum(v string, def int64, parse func(string) (int64, error)) (int64, error) {
	if strings.TrimSpace(v) == "" {
		return def, nil
	}
	return parse(v)
}

// maximumInt is maximum for a count.
func maximumInt(v string, def int) (int, error) {
	n, err := maximum(v, int64(def), func(s string) (int64, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a count (0 or more)", s)
		}
		return n, nil
	})
	return int(n), err
}

// Limits are the per-job default limits of the flags.
func (c *Config) Limits() Limits { return c.limits }

// Max are the runner's maxima of the flags (zero: none); each is its default unless
// its flag says otherwise.
func (c *Config) Max() Limits { return c.max }

// Options are the sandbox's options from the flags.
func (c *Config) Options() Options {
	return Options{Mode: c.Mode, UID: c.UID, GID: c.GID, Binds: c.binds,
		NetDeny: c.deny, NetDenyHost: c.denyHost, NeedNetwork: c.Network == model.NetworkOutbound,
		Ahead: AheadOptions{Max: c.Ahead, TTL: c.AheadTTL}, Fork: c.Fork, Zygote: c.Zygote}
}
