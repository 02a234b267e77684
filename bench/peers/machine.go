package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine is what a run's figures depend on besides the code: printed first, for
// docs/benchmarks.md's "Machine".
type machine struct {
	cpu, virt, kernel, os, mem, redis, goVersion, revision string
	cores                                                  int
	loadBefore, loadAfter                                  string
	at                                                     time.Time
}

func describeMachine(root, redisPath string) machine {
	m := machine{cores: runtime.NumCPU(), at: time.Now().UTC(), loadBefore: loadAvg()}
	m.cpu = firstField("/proc/cpuinfo", "model name")
	if strings.Contains(firstField("/proc/cpuinfo", "flags"), " hypervisor") {
		m.virt = "a virtual machine"
	}
	if v := output("", "systemd-detect-virt"); v != "" && v != "none" {
		m.virt = strings.TrimPrefix(m.virt+", "+v, ", ")
	}
	m.kernel = readTrim("/proc/sys/kernel/osrelease")
	m.os = strings.Trim(firstField("/etc/os-release", "PRETTY_NAME"), `"`)
	m.mem = firstField("/proc/meminfo", "MemTotal")
	m.redis = output("", redisPath, "--version")
	m.goVersion = output("", "go", "version")
	m.revision = output(root, "git", "describe", "--always", "--dirty")
	return m
}

func (m machine) print() {
	fmt.Printf("machine: %s, %d cores (%s), %s RAM, %s, kernel %s\n", m.cpu, m.cores, m.virt, m.mem, m.os, m.kernel)
	fmt.Printf("software: %s; %s; revision %s; %s\n", m.redis, m.goVersion, m.revision, m.at.Format("2006-01-02 15:04 UTC"))
}

// firstField is the value of the first "key: value" (or key=value) line of a file.
func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			k, v, ok = strings.Cut(sc.Text(), "=")
		}
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes.
func loadAvg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// output is a command's output, trimmed ("" when it fails).
func output(dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
