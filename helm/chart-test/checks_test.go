package charttest

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// outside lists what a scenario may refer to without rendering it: Secrets
// (name → keys), ConfigMaps, and peer addresses outside the release.
type outside struct {
	secrets    map[string][]string
	configMaps []string
	addrs      []string
	issuers    []string // cert-manager issuers, "ClusterIssuer/<name>"
}

// checkRelease runs the checks that hold for every scenario.
func checkRelease(t *testing.T, r *release, out outside) {
	t.Helper()
	checkMetadata(t, r)
	for _, w := range r.workloads() {
		checkWorkload(t, r, w, out)
	}
	checkServices(t, r)
	checkHPAs(t, r)
	checkPDBs(t, r)
	checkNetworkPolicies(t, r)
	checkNetworkPolicyPeers(t, r)
	checkServiceMonitors(t, r)
	checkRedisWiring(t, r)
	checkTestPods(t, r)
	checkPKIJob(t, r)
	checkCertificates(t, r, out)
	checkTLSWiring(t, r)
	checkSandbox(t, r)
	checkIdentities(t, r)
	checkSpread(t, r)
}

// checkTestPods: the `helm test` Pod is a hook, locked down like the services,
// and checks every rendered service through its Service's admin port.
func checkTestPods(t *testing.T, r *release) {
	t.Helper()
	for _, o := range r.all("Pod") {
		p := o.Obj.(*corev1.Pod)
		if p.Annotations["helm.sh/hook"] != "test" {
			t.Errorf("%s: a Pod that is not a helm test hook", o)
		}
		if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("%s: restartPolicy %q, want Never", o, p.Spec.RestartPolicy)
		}
		if psc := p.Spec.SecurityContext; psc == nil || !isTrue(psc.RunAsNonRoot) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext is not non-root with RuntimeDefault seccomp", o)
		}
		checked := map[string]bool{}
		for _, c := range p.Spec.Containers {
			if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("%s container %s: securityContext not locked down", o, c.Name)
			}
			addr := envOf(c)["ADMIN_ADDR"].Value
			host, port, err := net.SplitHostPort(addr)
			svc := r.service(host)
			if err != nil || svc == nil {
				t.Errorf("%s container %s: ADMIN_ADDR %q is not a rendered Service", o, c.Name, addr)
				continue
			}
			if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == "admin" && strconv.Itoa(int(sp.Port)) == port }) {
				t.Errorf("%s container %s: ADMIN_ADDR %q is not the admin port of Service %s", o, c.Name, addr, host)
			}
			checked[svc.Labels[labelComponent]] = true
		}
		for comp := range components {
			if _, ok := r.component(comp); ok && !checked[comp] {
				t.Errorf("%s: does not check %s", o, comp)
			}
		}
	}
}

func checkMetadata(t *testing.T, r *release) {
	t.Helper()
	seen := map[string]string{}
	for _, o := range r.objs {
		m := o.Meta
		key := o.Kind + " " + m.Namespace + "/" + m.Name
		if prev, dup := seen[key]; dup {
			t.Errorf("%s: rendered twice (also %s)", o, prev)
		}
		seen[key] = o.Source
		if m.Namespace == "" {
			t.Errorf("%s: no metadata.namespace", o)
		}
		for _, msg := range validation.IsDNS1123Subdomain(m.Name) {
			t.Errorf("%s: name: %s", o, msg)
		}
		if strings.HasSuffix(o.Kind, "/Service") {
			for _, msg := range validation.IsDNS1035Label(m.Name) {
				t.Errorf("%s: Service name: %s", o, msg)
			}
		}
		if strings.HasSuffix(o.Kind, "/StatefulSet") && len(m.Name) > 52 {
			t.Errorf("%s: StatefulSet name longer than 52 characters (its pods' controller-revision-hash label would exceed 63)", o)
		}
		for _, e := range metav1validation.ValidateLabels(m.Labels, field.NewPath("metadata", "labels")) {
			t.Errorf("%s: %v", o, e)
		}
		for _, l := range []string{labelName, labelInstance, "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "app.kubernetes.io/part-of", "helm.sh/chart"} {
			if m.Labels[l] == "" {
				t.Errorf("%s: label %s missing", o, l)
			}
		}
	}
}

func checkWorkload(t *testing.T, r *release, w workload, out outside) {
	t.Helper()
	if !checkWorkloadSelector(t, r, w) {
		return
	}
	checkPodSecurity(t, r, w)
	volumes := checkWorkloadVolumes(t, r, w, out)
	spec := w.pod.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		where := fmt.Sprintf("%s container %q", w, c.Name)
		checkContainerBasics(t, where, c)
		checkContainerPorts(t, where, c)
		checkContainerEnv(t, r, where, c, out)
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: volumeMount %q has no volume", where, m.Name)
			}
		}
		if sc := c.SecurityContext; sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" }) {
				t.Errorf("%s: read-only root filesystem without a writable /tmp", where)
			}
		}
	}

	if comp, ok := components[w.pod.Labels[labelComponent]]; ok {
		checkHeroContainer(t, r, w, comp, out)
	}
}

// checkWorkloadSelector: the workload's selector is valid, matches its own pod's
// (valid) labels and no other workload's pods. False when it is bad or empty.
func checkWorkloadSelector(t *testing.T, r *release, w workload) bool {
	t.Helper()
	sel, err := mustSelector(w.selector)
	if err != nil || sel.Empty() {
		t.Errorf("%s: bad or empty selector: %v", w, err)
		return false
	}
	if !sel.Matches(labels.Set(w.pod.Labels)) {
		t.Errorf("%s: selector %s does not match its own pod labels %v", w, sel, w.pod.Labels)
	}
	for _, e := range metav1validation.ValidateLabels(w.pod.Labels, field.NewPath("spec", "template", "metadata", "labels")) {
		t.Errorf("%s: %v", w, e)
	}
	if n := len(r.selectedWorkloads(sel)); n != 1 {
		t.Errorf("%s: selector %s matches %d workloads' pods, want 1", w, sel, n)
	}
	return true
}

// checkPodSecurity: the pod mounts no token, has no service links, runs as a
// rendered ServiceAccount (or the default), non-root with RuntimeDefault seccomp.
func checkPodSecurity(t *testing.T, r *release, w workload) {
	t.Helper()
	spec := w.pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken is not false (the services never call the Kubernetes API)", w)
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks is not false", w)
	}
	if sa := spec.ServiceAccountName; sa != "" && sa != "default" {
		if _, ok := r.find("ServiceAccount", sa); !ok {
			t.Errorf("%s: serviceAccountName %q is not rendered", w, sa)
		}
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod securityContext.runAsNonRoot is not true", w)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccompProfile is not RuntimeDefault", w)
	}
}

// checkWorkloadVolumes: each volume once, its ConfigMap or Secret rendered, made or
// expected (and a made Secret has the keys it mounts). It returns the volume names,
// the StatefulSet's claim templates with them.
func checkWorkloadVolumes(t *testing.T, r *release, w workload, out outside) map[string]bool {
	t.Helper()
	volumes := map[string]bool{}
	for _, v := range w.pod.Spec.Volumes {
		if volumes[v.Name] {
			t.Errorf("%s: volume %q twice", w, v.Name)
		}
		volumes[v.Name] = true
		if v.ConfigMap != nil && r.configMap(v.ConfigMap.Name) == nil && !slices.Contains(out.configMaps, v.ConfigMap.Name) {
			t.Errorf("%s: volume %q uses ConfigMap %q, which is neither rendered nor expected to exist", w, v.Name, v.ConfigMap.Name)
		}
		if v.Secret != nil {
			checkSecretVolume(t, r, w, v, out)
		}
	}
	if w.sts != nil {
		for _, pvc := range w.sts.Spec.VolumeClaimTemplates {
			volumes[pvc.Name] = true
		}
	}
	return volumes
}

// checkSecretVolume: the Secret of volume v is rendered or expected, or made by
// the hook Job or cert-manager with the keys the volume mounts.
func checkSecretVolume(t *testing.T, r *release, w workload, v corev1.Volume, out outside) {
	t.Helper()
	keys, made := r.madeSecrets()[v.Secret.SecretName]
	switch {
	case r.secret(v.Secret.SecretName) != nil || out.secrets[v.Secret.SecretName] != nil:
	case !made:
		t.Errorf("%s: volume %q uses Secret %q, which is neither rendered, nor made by the hook Job or cert-manager, nor expected to exist", w, v.Name, v.Secret.SecretName)
	default:
		for _, it := range v.Secret.Items {
			if !slices.Contains(keys, it.Key) {
				t.Errorf("%s: volume %q: Secret %q has no key %q", w, v.Name, v.Secret.SecretName, it.Key)
			}
		}
	}
}

// checkContainerBasics: a valid name, a tagged or pinned image, no privilege
// escalation, every capability dropped, not privileged, cpu and memory requests.
func checkContainerBasics(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, msg := range validation.IsDNS1123Label(c.Name) {
		t.Errorf("%s: name: %s", where, msg)
	}
	if !strings.Contains(c.Image, "@sha256:") && !strings.Contains(c.Image[strings.LastIndex(c.Image, "/")+1:], ":") {
		t.Errorf("%s: image %q has neither tag nor digest", where, c.Image)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", where)
	}
	if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: capabilities do not drop ALL", where)
	}
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", where)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: no cpu and memory requests", where)
	}
}

// checkContainerPorts: valid port names, each name and number once.
func checkContainerPorts(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	portNames, portNums := map[string]bool{}, map[int32]bool{}
	for _, p := range c.Ports {
		for _, msg := range validation.IsValidPortName(p.Name) {
			t.Errorf("%s: port name %q: %s", where, p.Name, msg)
		}
		if portNames[p.Name] || portNums[p.ContainerPort] {
			t.Errorf("%s: port %s/%d twice", where, p.Name, p.ContainerPort)
		}
		portNames[p.Name], portNums[p.ContainerPort] = true, true
	}
}

// checkContainerEnv: valid variable names, each once, their sources there; envFrom
// ConfigMaps and Secrets rendered, expected or optional.
func checkContainerEnv(t *testing.T, r *release, where string, c corev1.Container, out outside) {
	t.Helper()
	envNames := map[string]bool{}
	for _, e := range c.Env {
		if envNames[e.Name] {
			t.Errorf("%s: env %s twice", where, e.Name)
		}
		envNames[e.Name] = true
		for _, msg := range validation.IsEnvVarName(e.Name) {
			t.Errorf("%s: env name %q: %s", where, e.Name, msg)
		}
		if e.ValueFrom != nil {
			checkEnvSource(t, r, where+" env "+e.Name, e.ValueFrom, out)
		}
	}
	for _, ef := range c.EnvFrom {
		if ref := ef.ConfigMapRef; ref != nil && r.configMap(ref.Name) == nil && !isTrue(ref.Optional) && !slices.Contains(out.configMaps, ref.Name) {
			t.Errorf("%s: envFrom ConfigMap %q is neither rendered nor optional", where, ref.Name)
		}
		if ref := ef.SecretRef; ref != nil && r.secret(ref.Name) == nil && !isTrue(ref.Optional) && out.secrets[ref.Name] == nil {
			t.Errorf("%s: envFrom Secret %q is neither rendered nor optional", where, ref.Name)
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

func checkEnvSource(t *testing.T, r *release, where string, src *corev1.EnvVarSource, out outside) {
	t.Helper()
	if ref := src.SecretKeyRef; ref != nil {
		if s := r.secret(ref.Name); s != nil {
			if _, ok := s.Data[ref.Key]; !ok {
				if _, ok := s.StringData[ref.Key]; !ok {
					t.Errorf("%s: Secret %q has no key %q", where, ref.Name, ref.Key)
				}
			}
		} else if keys, ok := out.secrets[ref.Name]; !ok || !slices.Contains(keys, ref.Key) {
			if !isTrue(ref.Optional) {
				t.Errorf("%s: Secret %q key %q is neither rendered nor expected to exist", where, ref.Name, ref.Key)
			}
		}
	}
	if ref := src.ConfigMapKeyRef; ref != nil {
		if cm := r.configMap(ref.Name); cm != nil {
			if _, ok := cm.Data[ref.Key]; !ok {
				t.Errorf("%s: ConfigMap %q has no key %q", where, ref.Name, ref.Key)
			}
		} else if !isTrue(ref.Optional) && !slices.Contains(out.configMaps, ref.Name) {
			t.Errorf("%s: ConfigMap %q is not rendered", where, ref.Name)
		}
	}
}

// checkHeroContainer checks one of the five services' pods: ports, the env
// twins of the flags, probes, and the peers it calls.
func checkHeroContainer(t *testing.T, r *release, w workload, comp componentSpec, out outside) {
	t.Helper()
	cs := w.pod.Spec.Containers
	name := w.pod.Labels[labelComponent]
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Errorf("%s: no container named %q", w, name)
		return
	}
	c := cs[i]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if got, want := keysOf(ports), keysOf(comp.ports); !slices.Equal(got, want) {
		t.Errorf("%s: container ports %v, want %v", w, got, want)
	}
	checkHeroEnv(t, r, w, comp, c, ports, out)
	checkHeroProbes(t, w, c)
	// Every service has its Service with the same named ports.
	svc := r.service(w.name)
	if svc == nil {
		t.Errorf("%s: no Service named %s", w, w.name)
		return
	}
	svcPorts := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p.Port
		if p.TargetPort != intstr.FromString(p.Name) {
			t.Errorf("Service %s: port %s targets %s, want the container port of the same name", svc.Name, p.Name, p.TargetPort.String())
		}
	}
	if got, want := keysOf(svcPorts), keysOf(ports); !slices.Equal(got, want) {
		t.Errorf("Service %s: ports %v, want %v", svc.Name, got, want)
	}
}

// checkHeroEnv: the service's listen addresses are its container ports; REDIS_URL
// is from a Secret or a URL without a password; its variables are all there (the
// admin secret from a Secret); LOG_LEVEL and LOG_FORMAT come from the shared
// ConfigMap; its peers' addresses reach them.
func checkHeroEnv(t *testing.T, r *release, w workload, comp componentSpec, c corev1.Container, ports map[string]int32, out outside) {
	t.Helper()
	env := envOf(c)
	for port, envName := range comp.addrEnv {
		if got, want := env[envName].Value, ":"+strconv.Itoa(int(ports[port])); got != want {
			t.Errorf("%s: %s=%q, want %q (the %s container port)", w, envName, got, want, port)
		}
	}
	redisURL, ok := env["REDIS_URL"]
	if !ok || (redisURL.ValueFrom == nil && strings.Contains(redact(redisURL.Value), "xxxxx")) || (redisURL.ValueFrom != nil && redisURL.ValueFrom.SecretKeyRef == nil) {
		t.Errorf("%s: REDIS_URL neither from a Secret nor a plain URL without a password", w)
	}
	for _, e := range comp.env {
		if _, ok := env[e]; !ok {
			t.Errorf("%s: env %s missing", w, e)
		}
	}
	if c.Name == "supervisor-daemon" {
		if e := env["HERO_ADMIN_SECRET"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: HERO_ADMIN_SECRET does not come from a Secret", w)
		}
	}
	// The shared ConfigMap: LOG_LEVEL and LOG_FORMAT through envFrom.
	var shared *corev1.ConfigMap
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			if cm := r.configMap(ef.ConfigMapRef.Name); cm != nil {
				shared = cm
			}
		}
	}
	if shared == nil {
		t.Errorf("%s: no rendered ConfigMap in envFrom", w)
	} else {
		for _, k := range []string{"LOG_LEVEL", "LOG_FORMAT"} {
			if shared.Data[k] == "" {
				t.Errorf("%s: shared ConfigMap %s has no %s", w, shared.Name, k)
			}
		}
	}
	for envName, peer := range comp.peers {
		checkPeerAddr(t, r, w, envName, env[envName].Value, peer, out)
	}
}

// checkHeroProbes: liveness /healthz, readiness /readyz (and startup, if any,
// /healthz), HTTP GET on the admin port.
func checkHeroProbes(t *testing.T, w workload, c corev1.Container) {
	t.Helper()
	probes := []struct {
		kind, path string
		p          *corev1.Probe
		required   bool
	}{
		{"liveness", "/healthz", c.LivenessProbe, true},
		{"readiness", "/readyz", c.ReadinessProbe, true},
		{"startup", "/healthz", c.StartupProbe, false},
	}
	for _, pr := range probes {
		if pr.p == nil {
			if pr.required {
				t.Errorf("%s: no %s probe", w, pr.kind)
			}
			continue
		}
		h := pr.p.HTTPGet
		if h == nil || h.Path != pr.path || h.Port != intstr.FromString("admin") {
			t.Errorf("%s: %s probe is not HTTP GET %s on port admin: %+v", w, pr.kind, pr.path, pr.p.ProbeHandler)
		}
		if pr.kind != "readiness" && pr.p.SuccessThreshold > 1 {
			t.Errorf("%s: %s probe successThreshold must be 1", w, pr.kind)
		}
	}
}

func checkPeerAddr(t *testing.T, r *release, w workload, envName, addr, peer string, out outside) {
	t.Helper()
	if strings.Contains(addr, ",") {
		for _, a := range strings.Split(addr, ",") {
			checkPeerAddr(t, r, w, envName, a, peer, out)
		}
		return
	}
	if rest, ok := strings.CutPrefix(addr, "dns:///"); ok {
		// Every ready pod behind a headless Service of the release, by its full name
		// (<Service>.<namespace>.svc.<cluster domain>), or an expected outside address.
		host, port, err := net.SplitHostPort(rest)
		parts := strings.SplitN(host, ".", 4)
		if err != nil || len(parts) != 4 || parts[2] != "svc" {
			if !slices.Contains(out.addrs, addr) {
				t.Errorf("%s: %s=%q is neither dns:///<Service>.<namespace>.svc.<domain>:<port> nor an expected outside address", w, envName, addr)
			}
			return
		}
		svc := r.service(parts[0])
		if svc == nil || svc.Namespace != parts[1] || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s: %s=%q: %s is not a headless Service of the release in namespace %s (a ClusterIP name resolves to one address: no replica but the one the connection lands on)", w, envName, addr, parts[0], parts[1])
			return
		}
		addr = parts[0] + ":" + port
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		t.Errorf("%s: %s=%q is not host:port", w, envName, addr)
		return
	}
	svc := r.service(host)
	if svc == nil {
		if !slices.Contains(out.addrs, addr) {
			t.Errorf("%s: %s=%q: no Service %q in the release and not an expected outside address", w, envName, addr, host)
		}
		return
	}
	if svc.Labels[labelComponent] != peer {
		t.Errorf("%s: %s=%q points at Service %s of component %q, want %q", w, envName, addr, host, svc.Labels[labelComponent], peer)
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "grpc" {
			if strconv.Itoa(int(p.Port)) != port {
				t.Errorf("%s: %s=%q but Service %s serves grpc on %d", w, envName, addr, host, p.Port)
			}
			return
		}
	}
	t.Errorf("%s: %s=%q: Service %s has no grpc port", w, envName, addr, host)
}

func checkServices(t *testing.T, r *release) {
	t.Helper()
	for _, s := range r.services() {
		if len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s: no selector", s.Name)
			continue
		}
		ws := r.selectedWorkloads(labels.SelectorFromSet(s.Spec.Selector))
		if len(ws) != 1 {
			t.Errorf("Service %s: selector %v matches %d workloads, want 1", s.Name, s.Spec.Selector, len(ws))
			continue
		}
		named := containerPortNames(ws[0].pod)
		seen := map[string]bool{}
		for _, p := range s.Spec.Ports {
			if seen[p.Name] {
				t.Errorf("Service %s: port name %q twice", s.Name, p.Name)
			}
			seen[p.Name] = true
			if p.TargetPort.Type == intstr.String {
				if _, ok := named[p.TargetPort.StrVal]; !ok {
					t.Errorf("Service %s: targetPort %q is not a container port of %s", s.Name, p.TargetPort.StrVal, ws[0])
				}
			}
			if p.NodePort != 0 && s.Spec.Type != corev1.ServiceTypeNodePort && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
				t.Errorf("Service %s: nodePort on a %s Service", s.Name, s.Spec.Type)
			}
		}
		if s.Spec.ExternalTrafficPolicy != "" && s.Spec.Type != corev1.ServiceTypeNodePort && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			t.Errorf("Service %s: externalTrafficPolicy on a %s Service", s.Name, s.Spec.Type)
		}
		if s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP && seen["admin"] {
			t.Errorf("Service %s: the admin port is exposed on a %s Service", s.Name, s.Spec.Type)
		}
	}
	for _, s := range r.statefulSets() {
		gov := r.service(s.Spec.ServiceName)
		if gov == nil || gov.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("StatefulSet %s: serviceName %q is not a rendered headless Service", s.Name, s.Spec.ServiceName)
		}
	}
}

func checkHPAs(t *testing.T, r *release) {
	t.Helper()
	scaled := map[string]bool{}
	for _, h := range r.hpas() {
		ref := h.Spec.ScaleTargetRef
		w, ok := r.workloadNamed(ref.Name)
		if ref.APIVersion != "apps/v1" || !ok || w.kind != ref.Kind {
			t.Errorf("HPA %s: scaleTargetRef %+v is not a rendered Deployment or StatefulSet", h.Name, ref)
			continue
		}
		scaled[ref.Name] = true
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("HPA %s: minReplicas %v / maxReplicas %d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) == 0 {
			t.Errorf("HPA %s: no metrics", h.Name)
		}
		for _, m := range h.Spec.Metrics {
			if m.Resource == nil {
				continue
			}
			for _, c := range w.pod.Spec.Containers {
				if _, ok := c.Resources.Requests[m.Resource.Name]; !ok {
					t.Errorf("HPA %s: scales on %s utilization but container %s has no %s request", h.Name, m.Resource.Name, c.Name, m.Resource.Name)
				}
			}
		}
	}
	for _, w := range r.workloads() {
		if scaled[w.name] && w.replicas() != nil {
			t.Errorf("%s: sets replicas although an HPA scales it (each upgrade would reset the count)", w)
		}
		if !scaled[w.name] && w.replicas() == nil {
			t.Errorf("%s: no replicas and no HPA", w)
		}
	}
}

func (r *release) workloadNamed(name string) (workload, bool) {
	for _, w := range r.workloads() {
		if w.name == name {
			return w, true
		}
	}
	return workload{}, false
}

func checkPDBs(t *testing.T, r *release) {
	t.Helper()
	for _, p := range r.pdbs() {
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			t.Errorf("PDB %s: needs exactly one of minAvailable and maxUnavailable", p.Name)
		}
		for _, v := range []*intstr.IntOrString{p.Spec.MinAvailable, p.Spec.MaxUnavailable} {
			if v != nil && v.Type == intstr.String {
				for _, msg := range validation.IsValidPercent(v.StrVal) {
					t.Errorf("PDB %s: %q: %s", p.Name, v.StrVal, msg)
				}
			}
		}
		sel, err := mustSelector(p.Spec.Selector)
		if err != nil || len(r.selectedWorkloads(sel)) != 1 {
			t.Errorf("PDB %s: selector does not pick exactly one workload (%v)", p.Name, err)
		}
	}
}

func checkNetworkPolicies(t *testing.T, r *release) {
	t.Helper()
	for _, np := range r.networkPolicies() {
		sel, err := mustSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Errorf("NetworkPolicy %s: %v", np.Name, err)
			continue
		}
		ws := r.selectedWorkloads(sel)
		if len(ws) != 1 {
			t.Errorf("NetworkPolicy %s: podSelector picks %d workloads, want 1", np.Name, len(ws))
			continue
		}
		named := containerPortNames(ws[0].pod)
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil && p.Port.Type == intstr.String {
					if _, ok := named[p.Port.StrVal]; !ok {
						t.Errorf("NetworkPolicy %s: ingress port %q is not a container port of %s", np.Name, p.Port.StrVal, ws[0])
					}
				}
			}
		}
	}
}

func checkServiceMonitors(t *testing.T, r *release) {
	t.Helper()
	for _, sm := range r.serviceMonitors() {
		sel, err := mustSelector(&sm.Spec.Selector)
		if err != nil {
			t.Errorf("ServiceMonitor %s: %v", sm.Name, err)
			continue
		}
		matched := map[string]bool{}
		for _, s := range r.services() {
			if !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, s.Namespace) {
				continue
			}
			if sel.Matches(labels.Set(s.Labels)) {
				matched[s.Labels[labelComponent]] = true
			}
		}
		for comp := range components {
			if _, ok := r.component(comp); ok && !matched[comp] {
				t.Errorf("ServiceMonitor %s: does not select the Service of %s", sm.Name, comp)
			}
		}
		for comp := range matched {
			if _, ok := components[comp]; !ok {
				t.Errorf("ServiceMonitor %s: selects Services of %q, which has no metrics port", sm.Name, comp)
			}
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor %s: endpoints %+v, want port admin path /metrics", sm.Name, sm.Spec.Endpoints)
		}
	}
}

// checkRedisWiring: every service's REDIS_URL, from a Secret (a URL that may hold
// a password) or a plain value; with the bundled Redis it is plain and points at
// its Service, rediss:// exactly when Redis serves TLS.
func checkRedisWiring(t *testing.T, r *release) {
	t.Helper()
	bundled := r.redis()
	for _, d := range r.heroWorkloads() {
		for _, c := range d.pod.Spec.Containers {
			e, ok := envOf(c)["REDIS_URL"]
			if !ok {
				continue
			}
			raw := e.Value
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref := e.ValueFrom.SecretKeyRef
				s := r.secret(ref.Name)
				if bundled != nil {
					t.Errorf("%s: bundled Redis rendered but REDIS_URL comes from Secret %q", d, ref.Name)
				}
				if s == nil {
					continue
				}
				raw = string(s.Data[ref.Key])
			}
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
				t.Errorf("%s: REDIS_URL %q is not a redis://, rediss:// or unix:// URL", d, redact(raw))
				continue
			}
			if bundled == nil {
				if r.service(u.Hostname()) != nil {
					t.Errorf("%s: REDIS_URL points at Service %s of the release, but no Redis is rendered", d, u.Hostname())
				}
				continue
			}
			checkBundledURL(t, r, d.String(), u)
		}
	}
}

func checkBundledURL(t *testing.T, r *release, w string, u *url.URL) {
	t.Helper()
	sts := r.redis()
	svc := r.service(u.Hostname())
	if svc == nil || u.Port() != "6379" {
		t.Errorf("%s: REDIS_URL host %q is not the bundled Redis Service on 6379", w, u.Host)
		return
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("%s: REDIS_URL Service %s does not select StatefulSet %s", w, svc.Name, sts.Name)
	}
	args := strings.Join(sts.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--appendonly yes") {
		t.Errorf("StatefulSet %s: no --appendonly yes in %q", sts.Name, args)
	}
	if !strings.Contains(args, "--databases ") {
		t.Errorf("StatefulSet %s: no --databases in %q", sts.Name, args)
	}
	// As every Redis this project starts (docs/benchmarks.md "Redis's sorted sets").
	if !strings.Contains(args, "--zset-max-listpack-entries 8") {
		t.Errorf("StatefulSet %s: no --zset-max-listpack-entries 8 in %q", sts.Name, args)
	}
	// and its DUMPs uncompressed (docs/benchmarks.md "Job hashes read uncompressed")
	if !strings.Contains(args, "--rdbcompression no") {
		t.Errorf("StatefulSet %s: no --rdbcompression no in %q", sts.Name, args)
	}
	if tls := redisArg(sts, "--tls-port") != ""; tls != (u.Scheme == "rediss") {
		t.Errorf("%s: REDIS_URL scheme %s but Redis TLS is %v", w, u.Scheme, tls)
	}
}

func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}
