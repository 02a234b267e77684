package charttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The runner's job sandbox (issue 19) and the stable ids of the runner and the
// router (issue 17).

// checkSandbox: the runner container runs with exactly what bubblewrap needs and
// nothing more. With SANDBOX=bwrap: the pod in a user namespace of its own
// (hostUsers: false), the runner container with procMount Unmasked, a seccomp
// profile that allows namespaces and mounts (Localhost, or an explicit
// Unconfined), all capabilities dropped, no privilege escalation, not privileged,
// not root. With SANDBOX=none: RuntimeDefault and none of the above. No other
// container of the release gets an unmasked /proc or another seccomp profile than
// RuntimeDefault, and no other pod a user namespace it does not need.
func checkSandbox(t *testing.T, r *release) {
	t.Helper()
	for _, w := range r.workloads() {
		spec := w.pod.Spec
		runnerPod := w.pod.Labels[labelComponent] == "runner"
		checkNoSandboxOutsideRunner(t, w, runnerPod)
		if !runnerPod {
			if spec.HostUsers != nil && !*spec.HostUsers {
				t.Errorf("%s: hostUsers false, which only the runner's sandbox needs", w)
			}
			continue
		}
		i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "runner" })
		if i < 0 {
			t.Errorf("%s: no runner container", w)
			continue
		}
		c := spec.Containers[i]
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: runner container without securityContext", w)
			continue
		}
		checkRunnerLockedDown(t, w, c)
		if sp := sc.SeccompProfile; sp == nil {
			t.Errorf("%s: runner container without its own seccompProfile", w)
			continue
		}
		switch mode := envOf(c)["SANDBOX"].Value; mode {
		case "bwrap":
			checkSandboxBwrap(t, w, sc)
		case "none":
			checkSandboxNone(t, w, sc)
		default:
			t.Errorf("%s: SANDBOX=%q, want bwrap or none", w, mode)
		}
	}
}

// checkNoSandboxOutsideRunner: no container but the runner pod's runner container
// gets an unmasked /proc, a seccomp profile other than RuntimeDefault, or AppArmor
// Unconfined.
func checkNoSandboxOutsideRunner(t *testing.T, w workload, runnerPod bool) {
	t.Helper()
	spec := w.pod.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if runnerPod && c.Name == "runner" {
			continue
		}
		sc := c.SecurityContext
		if sc != nil && sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			t.Errorf("%s container %s: procMount %s (only the runner's sandbox needs an unmasked /proc)", w, c.Name, *sc.ProcMount)
		}
		if sc != nil && sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s container %s: seccompProfile %s (only the runner container's differs from RuntimeDefault)", w, c.Name, sc.SeccompProfile.Type)
		}
		if sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
			t.Errorf("%s container %s: AppArmor Unconfined", w, c.Name)
		}
	}
}

// checkRunnerLockedDown: what holds for the runner container either way: not
// privileged, no privilege escalation, every capability dropped and none added,
// not root, and the jobs' limits set.
func checkRunnerLockedDown(t *testing.T, w workload, c corev1.Container) {
	t.Helper()
	sc, spec, env := c.SecurityContext, w.pod.Spec, envOf(c)
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: runner container privileged", w)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: runner container may escalate privileges", w)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: runner container capabilities %+v, want drop ALL and nothing added", w, sc.Capabilities)
	}
	nonRoot := isTrue(sc.RunAsNonRoot) || (spec.SecurityContext != nil && isTrue(spec.SecurityContext.RunAsNonRoot))
	if !nonRoot {
		t.Errorf("%s: runner container may run as root", w)
	}
	for _, k := range []string{"JOB_MEMORY", "JOB_PIDS", "JOB_CPU", "JOB_FILE_SIZE", "JOB_DISK"} {
		if env[k].Value == "" {
			t.Errorf("%s: %s not set", w, k)
		}
	}
}

// checkSandboxBwrap: SANDBOX=bwrap: a user namespace of the pod's own, procMount
// Unmasked, and a seccomp profile that allows namespaces and mounts (Localhost
// under the kubelet's directory, or an explicit Unconfined).
func checkSandboxBwrap(t *testing.T, w workload, sc *corev1.SecurityContext) {
	t.Helper()
	spec := w.pod.Spec
	if spec.HostUsers == nil || *spec.HostUsers {
		t.Errorf("%s: SANDBOX=bwrap without hostUsers: false (Kubernetes grants procMount Unmasked only in a user namespace)", w)
	}
	if sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount {
		t.Errorf("%s: SANDBOX=bwrap without procMount: Unmasked (bwrap mounts each job's /proc)", w)
	}
	switch sp := sc.SeccompProfile; sp.Type {
	case corev1.SeccompProfileTypeLocalhost:
		if p := sp.LocalhostProfile; p == nil || *p == "" || path.IsAbs(*p) || strings.Contains(*p, "..") {
			t.Errorf("%s: seccomp Localhost with localhostProfile %v, want a path under the kubelet's seccomp directory", w, sp.LocalhostProfile)
		}
	case corev1.SeccompProfileTypeUnconfined:
	default:
		t.Errorf("%s: SANDBOX=bwrap with seccomp %s, which refuses the namespace and mount calls bwrap needs", w, sp.Type)
	}
}

// checkSandboxNone: SANDBOX=none: none of what bwrap needs (no user namespace, the
// default /proc, RuntimeDefault seccomp, no AppArmor Unconfined).
func checkSandboxNone(t *testing.T, w workload, sc *corev1.SecurityContext) {
	t.Helper()
	spec := w.pod.Spec
	if spec.HostUsers != nil && !*spec.HostUsers {
		t.Errorf("%s: SANDBOX=none with hostUsers: false, which only the sandbox needs", w)
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		t.Errorf("%s: SANDBOX=none with procMount %s", w, *sc.ProcMount)
	}
	if sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: SANDBOX=none with seccomp %s, want RuntimeDefault", w, sc.SeccompProfile.Type)
	}
	if sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("%s: SANDBOX=none with AppArmor Unconfined", w)
	}
}

// idEnv is the variable that holds each StatefulSet service's id.
var idEnv = map[string]string{"runner": "WORKER_ID", "router": "ROUTER_ID"}

// checkIdentities: the runner and the router are StatefulSets whose processes take
// their ids from their pod's name and namespace (downward API), so that a replica
// keeps its id across restarts and replacements and no two replicas (nor two
// releases of one name in two namespaces on one Redis) share one: the ids of every
// ordinal the StatefulSet (or its HPA) may run are checked distinct. The runner's
// STATE_DIR is on a writable volume of the pod's own (a claim template or an
// emptyDir), apart from the jobs' work directory.
func checkIdentities(t *testing.T, r *release) {
	t.Helper()
	for comp, idVar := range idEnv {
		w, ok := r.component(comp)
		if !ok {
			continue
		}
		if w.sts == nil {
			t.Errorf("%s: %s is not a StatefulSet: a replacement pod would get a new name and so a new %s", w, comp, idVar)
			continue
		}
		if gov := r.service(w.sts.Spec.ServiceName); gov == nil || gov.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s: governing Service %q is not a rendered headless Service", w, w.sts.Spec.ServiceName)
		}
		if s := w.sts.Spec.UpdateStrategy; s.Type != "" && s.Type != "RollingUpdate" {
			t.Errorf("%s: updateStrategy %s, want RollingUpdate", w, s.Type)
		}
		c := w.pod.Spec.Containers[slices.IndexFunc(w.pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == comp })]
		n := maxReplicas(r, w)
		seen := map[string]string{}
		for i := 0; i < n; i++ {
			pod := fmt.Sprintf("%s-%d", w.name, i)
			id, err := expandEnv(c, idVar, pod, "hero")
			if err != nil {
				t.Errorf("%s: %v", w, err)
				break
			}
			if !strings.Contains(id, pod) {
				t.Errorf("%s: %s=%q in pod %s does not come from the pod's name", w, idVar, id, pod)
			}
			if prev, dup := seen[id]; dup {
				t.Errorf("%s: pods %s and %s share %s %q", w, prev, pod, idVar, id)
			}
			seen[id] = pod
			if other, _ := expandEnv(c, idVar, pod, "other"); other == id {
				t.Errorf("%s: %s=%q does not name the namespace: a release of the same name in another namespace on the same Redis would share it", w, idVar, id)
			}
		}
		if comp == "runner" {
			checkStateDir(t, w, c)
		}
	}
}

// maxReplicas is how many pods a workload may run: its HPA's maximum, else replicas.
func maxReplicas(r *release, w workload) int {
	for _, h := range r.hpas() {
		if h.Spec.ScaleTargetRef.Name == w.name && h.Spec.ScaleTargetRef.Kind == w.kind {
			return int(h.Spec.MaxReplicas)
		}
	}
	if p := w.replicas(); p != nil {
		return int(*p)
	}
	return 1
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandEnv is the value of variable name in container c of a pod named pod in
// namespace ns, as the kubelet makes it: literal values, the downward API's
// metadata.name and metadata.namespace, and $(VAR) references to variables
// defined earlier in the list (a reference to a later one stays as it is).
func expandEnv(c corev1.Container, name, pod, ns string) (string, error) {
	vals := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			v = pod
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			v = ns
		case e.ValueFrom != nil:
			v = "<" + e.Name + " from elsewhere>"
		default:
			v = envRef.ReplaceAllStringFunc(v, func(ref string) string {
				if x, ok := vals[envRef.FindStringSubmatch(ref)[1]]; ok {
					return x
				}
				return ref
			})
		}
		vals[e.Name] = v
	}
	v, ok := vals[name]
	if !ok {
		return "", fmt.Errorf("%s is not set", name)
	}
	if envRef.MatchString(v) {
		return "", fmt.Errorf("%s=%q refers to a variable not defined before it", name, v)
	}
	return v, nil
}

// checkStateDir: STATE_DIR is the mount of a volume "state" of the pod's own,
// writable, exactly one of a claim template and a pod volume, an emptyDir when it
// is a pod volume; WORK_DIR is another writable mount.
func checkStateDir(t *testing.T, w workload, c corev1.Container) {
	t.Helper()
	env := envOf(c)
	mount := func(dir string) *corev1.VolumeMount {
		for i, m := range c.VolumeMounts {
			if m.MountPath == dir {
				return &c.VolumeMounts[i]
			}
		}
		return nil
	}
	state := mount(env["STATE_DIR"].Value)
	if state == nil || state.Name != "state" || state.ReadOnly || state.SubPath != "" {
		t.Errorf("%s: STATE_DIR=%q is not the writable mount of the volume state", w, env["STATE_DIR"].Value)
		return
	}
	claim := slices.ContainsFunc(w.sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == "state" })
	vi := slices.IndexFunc(w.pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "state" })
	switch {
	case claim && vi >= 0:
		t.Errorf("%s: state is both a claim template and a pod volume", w)
	case !claim && (vi < 0 || w.pod.Spec.Volumes[vi].EmptyDir == nil):
		t.Errorf("%s: state is neither a claim template nor an emptyDir", w)
	}
	work := mount(env["WORK_DIR"].Value)
	if work == nil || work.ReadOnly || work.Name == "state" {
		t.Errorf("%s: WORK_DIR=%q is not a writable mount apart from the state directory", w, env["WORK_DIR"].Value)
	}
}

// runnerContainer returns the runner's container, failing the test without one.
func runnerContainer(t *testing.T, r *release) (workload, corev1.Container) {
	t.Helper()
	w := mustComponent(t, r, "runner")
	i := slices.IndexFunc(w.pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "runner" })
	if i < 0 {
		t.Fatalf("%s: no runner container", w)
	}
	return w, w.pod.Spec.Containers[i]
}

// wantSeccomp checks the runner container's seccomp profile: typ, and the
// Localhost profile's path when typ is Localhost.
func wantSeccomp(t *testing.T, r *release, typ corev1.SeccompProfileType, localhost string) {
	t.Helper()
	w, c := runnerContainer(t, r)
	sp := c.SecurityContext.SeccompProfile
	got := ""
	if sp != nil && sp.LocalhostProfile != nil {
		got = *sp.LocalhostProfile
	}
	if sp == nil || sp.Type != typ || got != localhost {
		t.Errorf("%s: runner seccompProfile %+v, want %s %q", w, sp, typ, localhost)
	}
}

// TestSeccompProfileFitsTheSandbox: the profile the chart names by default
// (deploy/docker/seccomp-runner.json, which operators install on the nodes) is a
// deny list over SCMP_ACT_ALLOW that leaves bwrap the calls it needs and refuses
// what a runner has no use for, as docs/security.md says.
func TestSeccompProfileFitsTheSandbox(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/docker/seccomp-runner.json")
	if err != nil {
		t.Skipf("deploy/docker/seccomp-runner.json not found (%v): module used outside the repository", err)
	}
	var p struct {
		DefaultAction string   `json:"defaultAction"`
		Architectures []string `json:"architectures"`
		Syscalls      []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet *int     `json:"errnoRet"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("seccomp-runner.json: %v", err)
	}
	if p.DefaultAction != "SCMP_ACT_ALLOW" || !slices.Contains(p.Architectures, "SCMP_ARCH_X86_64") || !slices.Contains(p.Architectures, "SCMP_ARCH_AARCH64") {
		t.Errorf("seccomp-runner.json: defaultAction %s, architectures %v; want SCMP_ACT_ALLOW on x86_64 and aarch64", p.DefaultAction, p.Architectures)
	}
	denied := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action != "SCMP_ACT_ERRNO" || s.ErrnoRet == nil || *s.ErrnoRet != 1 {
			t.Errorf("seccomp-runner.json: rule %v is %s, want SCMP_ACT_ERRNO with EPERM (1)", s.Names, s.Action)
		}
		for _, n := range s.Names {
			denied[n] = true
		}
	}
	// What bwrap calls to build a sandbox.
	for _, n := range []string{"clone", "clone3", "unshare", "mount", "umount2", "pivot_root", "sethostname", "prctl", "capset", "setresuid", "setresgid"} {
		if denied[n] {
			t.Errorf("seccomp-runner.json refuses %s, which bwrap needs", n)
		}
	}
	// A sample of what docs/security.md says it refuses.
	for _, n := range []string{"setns", "ptrace", "process_vm_readv", "bpf", "keyctl", "add_key", "perf_event_open", "init_module", "finit_module", "kexec_load", "reboot", "userfaultfd", "open_by_handle_at", "fsopen", "move_mount"} {
		if !denied[n] {
			t.Errorf("seccomp-runner.json allows %s", n)
		}
	}
}
