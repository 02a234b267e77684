package charttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// When a scenario renders a ServiceMonitor.
const (
	smNever   = iota
	smAlways  // serviceMonitor.enabled: true
	smWithCRD // "auto": only with --api-versions monitoring.coreos.com/v1/ServiceMonitor
)

type scenario struct {
	kinds          map[string]int // exact count of every kind (ServiceMonitor aside)
	serviceMonitor int
	outside        outside
	check          func(t *testing.T, r *release, appVersion string)
}

// Objects of the five services plus the bundled Redis, as rendered by default.
var defaultKinds = map[string]int{
	"ServiceAccount": 2, "ConfigMap": 1, "Secret": 1, // the services' and the PKI Job's; the admin secret
	"Deployment": 3, "StatefulSet": 3, // supervisor-daemon, scheduler, gateway; router, runner, redis
	"Service": 10,                             // 5 services + router, runner, scheduler and redis headless + redis
	"Pod":     1,                              // helm test
	"Job":     1, "Role": 1, "RoleBinding": 1, // the PKI hook
	"NetworkPolicy": 6, // one per service and the bundled Redis'
}

// withKinds is a copy of base with some counts changed (0 removes a kind).
func withKinds(base map[string]int, change map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range change {
		if v == 0 {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// wantPKIJob checks what the hook Job makes: certificates, Redis users.
func wantPKIJob(t *testing.T, r *release, certs, users bool) *pkiJob {
	t.Helper()
	j, ok := r.pkiJob()
	if !ok {
		t.Fatal("no PKI hook Job")
	}
	if j.certs != certs || j.users != users {
		t.Errorf("PKI Job: --certs=%v --redis-users=%v, want %v and %v", j.certs, j.users, certs, users)
	}
	return j
}

// wantMetricsFenced: by default a NetworkPolicy selects every service and admits to
// its admin port (/metrics, unauthenticated) nothing but the helm test Pod.
func wantMetricsFenced(t *testing.T, r *release) {
	t.Helper()
	fenced := map[string]bool{}
	for _, np := range r.networkPolicies() {
		sel, err := mustSelector(&np.Spec.PodSelector)
		if err != nil {
			continue
		}
		for _, w := range r.selectedWorkloads(sel) {
			comp := w.pod.Labels[labelComponent]
			if a := ingressOn(r, np, "admin"); comp != "redis" && !a.anyone && a.outside == 0 && slices.Equal(a.components, []string{"test"}) {
				fenced[comp] = true
			}
		}
	}
	for comp := range components {
		if !fenced[comp] {
			t.Errorf("%s: no NetworkPolicy keeps its admin port to the helm test Pod by default", comp)
		}
	}
}

// The release name helm-check.sh renders with.
const rel = "hero"

var scenarios = map[string]scenario{
	"default-values": {
		kinds: defaultKinds,
		check: func(t *testing.T, r *release, appVersion string) {
			for comp := range components {
				w := mustComponent(t, r, comp)
				c := w.pod.Spec.Containers[0]
				if want := "ghcr.io/hero-coordinator/" + comp + ":" + appVersion; c.Image != want {
					t.Errorf("%s: image %q, want %q", w, c.Image, want)
				}
				if sc := c.SecurityContext; sc == nil || !isTrue(sc.ReadOnlyRootFilesystem) {
					t.Errorf("%s: root filesystem is not read-only", w)
				}
				if psc := w.pod.Spec.SecurityContext; psc.RunAsUser == nil || *psc.RunAsUser == 0 {
					t.Errorf("%s: no non-zero runAsUser", w)
				}
			}
			wantEnv(t, r, "runner", map[string]string{"RUNNER_ID": "1", "RUNNER_CONTEXTS": "*", "SCRIPT_TYPES": "python,sh,bash", "CONCURRENCY": "4",
				"SANDBOX": "bwrap", "JOB_MEMORY": "1GiB", "JOB_PIDS": "512", "JOB_CPU": "0", "JOB_FILE_SIZE": "1GiB", "WORK_DIR": "/tmp", "STATE_DIR": "/home/hero/state"})
			wantSeccomp(t, r, corev1.SeccompProfileTypeLocalhost, "hero/seccomp-runner.json")
			runner, c := runnerContainer(t, r)
			if c.SecurityContext.AppArmorProfile != nil {
				t.Errorf("%s: AppArmor profile %+v set by default", runner, c.SecurityContext.AppArmorProfile)
			}
			if _, ok := envOf(c)["SANDBOX_BIND"]; ok {
				t.Errorf("%s: SANDBOX_BIND set without runner.sandbox.binds", runner)
			}
			if len(runner.sts.Spec.VolumeClaimTemplates) != 0 || runner.sts.Spec.PersistentVolumeClaimRetentionPolicy != nil {
				t.Errorf("%s: a claim template or retention policy without runner.persistence", runner)
			}
			for comp, want := range map[string]string{"runner": "hero-runner-0.hero", "router": "hero-router-0.hero"} {
				w := mustComponent(t, r, comp)
				c := w.pod.Spec.Containers[0]
				if got, err := expandEnv(c, idEnv[comp], w.name+"-0", "hero"); got != want || err != nil {
					t.Errorf("%s: %s in its first pod is %q (%v), want %q", w, idEnv[comp], got, err, want)
				}
			}
			wantEnv(t, r, "mycelium-gateway", map[string]string{"MYCELIUM_URL": "http://127.0.0.1:8989", "ROUTER_ADDR": rel + "-router:9655"})
			sched := "dns:///" + rel + "-scheduler-headless.hero.svc.cluster.local:9654"
			wantEnv(t, r, "router", map[string]string{"SCHEDULER_ADDR": sched, "GATEWAY_ADDR": rel + "-mycelium-gateway:9657"})
			wantEnv(t, r, "supervisor-daemon", map[string]string{"SCHEDULER_ADDR": sched})
			cm := r.configMap(rel + "-config")
			if cm == nil || cm.Data["LOG_LEVEL"] != "info" || cm.Data["LOG_FORMAT"] != "json" {
				t.Errorf("ConfigMap %s-config: want LOG_LEVEL=info LOG_FORMAT=json, got %v", rel, cm)
			}
			if s := r.secret(rel + "-admin"); s == nil || len(s.Data["admin-secret"]) < 32 {
				t.Errorf("Secret %s-admin: no generated admin-secret of 32 characters", rel)
			}
			sts := mustRedis(t, r)
			if got := redisArg(sts, "--databases"); got != "1024" {
				t.Errorf("StatefulSet %s: --databases %s, want 1024", sts.Name, got)
			}
			if c := sts.Spec.Template.Spec.Containers[0]; c.Image != "redis:7" {
				t.Errorf("StatefulSet %s: image %q, want redis:7", sts.Name, c.Image)
			}
			if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName != nil {
				t.Errorf("StatefulSet %s: want one claim template on the default StorageClass", sts.Name)
			}
			wantRedisURLs(t, r, "rediss://%s@"+rel+"-redis:6379/0")
			j := wantPKIJob(t, r, true, true)
			if j.days != 365 {
				t.Errorf("PKI Job: --days=%d, want 365", j.days)
			}
			wantHosts := []string{rel + "-supervisor-daemon", rel + "-supervisor-daemon.hero", rel + "-supervisor-daemon.hero.svc", rel + "-supervisor-daemon.hero.svc.cluster.local"}
			if got := j.args["--api-host"]; !slices.Equal(got, wantHosts) {
				t.Errorf("PKI Job: --api-host %v, want %v", got, wantHosts)
			}
			if got := j.args["--redis-host"]; len(got) != 4 || got[0] != rel+"-redis" || got[3] != rel+"-redis.hero.svc.cluster.local" {
				t.Errorf("PKI Job: --redis-host %v", got)
			}
			if j.prefix != rel {
				t.Errorf("PKI Job: --prefix %q, want %q", j.prefix, rel)
			}
			wantMetricsFenced(t, r)
		},
	},

	"minimal-values": {
		kinds: map[string]int{
			"ConfigMap": 1, "Secret": 1, "ServiceAccount": 1, // the PKI Job's alone
			"Deployment": 2, "Service": 9, "StatefulSet": 3,
			"Job": 1, "Role": 1, "RoleBinding": 1,
		},
		outside: outside{addrs: []string{"gateway.hero-edge.svc:9657"}},
		check: func(t *testing.T, r *release, _ string) {
			if _, ok := r.component("mycelium-gateway"); ok {
				t.Error("mycelium-gateway is disabled but rendered")
			}
			wantEnv(t, r, "router", map[string]string{"GATEWAY_ADDR": "gateway.hero-edge.svc:9657"})
			for _, w := range r.workloads() {
				if sa := w.pod.Spec.ServiceAccountName; sa != "default" {
					t.Errorf("%s: serviceAccountName %q, want default (serviceAccount.create=false)", w, sa)
				}
				if w.pod.Labels[labelComponent] != "redis" && w.pod.Spec.Containers[0].StartupProbe != nil {
					t.Errorf("%s: startup probe rendered although disabled", w)
				}
			}
			sts := mustRedis(t, r)
			if len(sts.Spec.VolumeClaimTemplates) != 0 {
				t.Errorf("StatefulSet %s: persistence off but a claim template is rendered", sts.Name)
			}
			if !slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" && v.EmptyDir != nil }) {
				t.Errorf("StatefulSet %s: no emptyDir data volume", sts.Name)
			}
			if redisArg(sts, "--protected-mode") != "no" {
				t.Errorf("StatefulSet %s: without a password redis must run with --protected-mode no", sts.Name)
			}
			wantRedisURLs(t, r, "rediss://"+rel+"-redis:6379/0")
			wantPKIJob(t, r, true, false)
		},
	},

	"external-redis-values": {
		kinds: withKinds(defaultKinds, map[string]int{"Secret": 2, "Service": 8, "StatefulSet": 2, "NetworkPolicy": 5}),
		check: func(t *testing.T, r *release, _ string) {
			wantRedisURLs(t, r, "rediss://hero:s3cr3t@redis.databases.svc.cluster.local:6380/0")
			wantPKIJob(t, r, true, false)
			if s := r.secret(rel + "-admin"); s == nil || string(s.Data["admin-secret"]) != "change-me-to-something-long-and-random" {
				t.Errorf("Secret %s-admin: does not hold adminSecret.value", rel)
			}
			for comp := range components {
				w := mustComponent(t, r, comp)
				img := w.pod.Spec.Containers[0].Image
				want := "registry.example.com/mirror/hero-coordinator/" + comp + ":1.2.3"
				if comp == "supervisor-daemon" {
					want = "registry.example.com/mirror/hero-coordinator/supervisor-daemon@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
				}
				if img != want {
					t.Errorf("%s: image %q, want %q", w, img, want)
				}
			}
			for comp, n := range map[string]int32{"supervisor-daemon": 2, "router": 2, "scheduler": 1} {
				if w := mustComponent(t, r, comp); *w.replicas() != n {
					t.Errorf("%s: %d replicas, want %d", w, *w.replicas(), n)
				}
			}
			wantEnv(t, r, "runner", map[string]string{"RUNNER_ID": "7", "RUNNER_CONTEXTS": "1,2,3", "SCRIPT_TYPES": "python,bash", "CONCURRENCY": "8", "LOG_LEVEL": "debug"})
			cm := r.configMap(rel + "-config")
			if cm == nil || cm.Data["LOG_LEVEL"] != "warn" || cm.Data["REDIS_POOL_SIZE"] != "64" || cm.Data["SHUTDOWN_TIMEOUT"] != "20s" {
				t.Errorf("ConfigMap %s-config: shared settings not rendered: %v", rel, cm)
			}
		},
	},

	"bundled-redis-values": {
		kinds: defaultKinds,
		check: func(t *testing.T, r *release, _ string) {
			sts := mustRedis(t, r)
			c := sts.Spec.Template.Spec.Containers[0]
			if c.Image != "docker.io/library/redis:7.4" {
				t.Errorf("StatefulSet %s: image %q", sts.Name, c.Image)
			}
			if got := redisArg(sts, "--databases"); got != "2048" {
				t.Errorf("StatefulSet %s: --databases %s, want 2048", sts.Name, got)
			}
			if got := redisArg(sts, "--maxmemory"); got != "512mb" {
				t.Errorf("StatefulSet %s: extraArgs not passed (--maxmemory %q)", sts.Name, got)
			}
			if len(sts.Spec.VolumeClaimTemplates) != 1 {
				t.Fatalf("StatefulSet %s: no claim template", sts.Name)
			}
			pvc := sts.Spec.VolumeClaimTemplates[0]
			if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast-ssd" || pvc.Spec.Resources.Requests.Storage().String() != "20Gi" {
				t.Errorf("StatefulSet %s: claim template %+v, want fast-ssd 20Gi", sts.Name, pvc.Spec)
			}
			if len(sts.Spec.Template.Spec.Tolerations) != 1 || sts.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("StatefulSet %s: scheduling settings not rendered", sts.Name)
			}
			wantRedisURLs(t, r, "redis://%s@"+rel+"-redis:6379/0")
			wantPKIJob(t, r, true, true)
			if redisArg(sts, "--tls-port") != "" || redisArg(sts, "--port") != "6379" {
				t.Errorf("StatefulSet %s: redis.bundled.tls.enabled=false but TLS is on", sts.Name)
			}
		},
	},

	// Issue 20, 6: more than one replica of every service, PodDisruptionBudgets, the
	// scheduler reached through its headless Service, Redis behind Sentinel.
	"ha-values": {
		kinds: withKinds(defaultKinds, map[string]int{"Service": 8, "StatefulSet": 2, "PodDisruptionBudget": 5, "NetworkPolicy": 5}),
		check: func(t *testing.T, r *release, _ string) {
			for _, comp := range []string{"supervisor-daemon", "scheduler", "router", "runner", "mycelium-gateway"} {
				w := mustComponent(t, r, comp)
				if n := w.replicas(); n == nil || *n != 3 {
					t.Errorf("%s: replicas %v, want 3", w, n)
				}
			}
			svc := r.service(rel + "-scheduler-headless")
			if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.PublishNotReadyAddresses {
				t.Fatalf("no headless Service of the ready schedulers: %+v", svc)
			}
			if ws := r.selectedWorkloads(labels.SelectorFromSet(svc.Spec.Selector)); len(ws) != 1 || ws[0].pod.Labels[labelComponent] != "scheduler" {
				t.Errorf("Service %s selects %v, want the scheduler's pods", svc.Name, ws)
			}
			sched := "dns:///" + rel + "-scheduler-headless.hero.svc.cluster.local:9654"
			wantEnv(t, r, "router", map[string]string{"SCHEDULER_ADDR": sched})
			wantEnv(t, r, "supervisor-daemon", map[string]string{"SCHEDULER_ADDR": sched})
			// The gateway's replicas share their node's lease in Redis (in the binary):
			// every replica sends, so the router reaches them through their Service.
			wantEnv(t, r, "router", map[string]string{"GATEWAY_ADDR": rel + "-mycelium-gateway:9657"})
			wantRedisURLs(t, r, "redis://%s@sentinel-0.redis-sentinel.databases.svc.cluster.local:26379/0?master_name=hero&addr=sentinel-1.redis-sentinel.databases.svc.cluster.local:26379&addr=sentinel-2.redis-sentinel.databases.svc.cluster.local:26379")
			wantPKIJob(t, r, true, true)
		},
	},

	"full-values": {
		kinds: map[string]int{
			"ServiceAccount": 2, "ConfigMap": 1,
			"Deployment": 3, "StatefulSet": 2, // router and runner; Redis is external
			"Service":                 9, // 5 + router, runner and scheduler headless + the public LoadBalancer
			"HorizontalPodAutoscaler": 1, "PodDisruptionBudget": 4, "NetworkPolicy": 5,
			"Pod": 1, "Job": 1, "Role": 1, "RoleBinding": 1,
		},
		serviceMonitor: smAlways,
		outside: outside{
			secrets: map[string][]string{
				"hero-admin-credentials": {"token"},
				"hero-redis-credentials": {"url"},
				"hero-extra-env":         nil,
			},
			configMaps: []string{"redis-ca"},
		},
		check: func(t *testing.T, r *release, _ string) {
			const full = "hero-prod"
			runner, ok := r.workloadNamed(full + "-runner")
			if !ok {
				t.Fatalf("StatefulSet %s-runner not rendered (fullnameOverride)", full)
			}
			if runner.replicas() != nil {
				t.Errorf("%s: replicas set although autoscaled", runner)
			}
			if sc := runner.pod.Spec.Containers[0].SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || *sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: per-service false did not override the default readOnlyRootFilesystem: true", runner)
			}
			sched := mustComponent(t, r, "scheduler")
			if s := sched.deploy.Spec.Strategy; s.Type != appsv1.RecreateDeploymentStrategyType || s.RollingUpdate != nil {
				t.Errorf("%s: strategy %+v, want Recreate without rollingUpdate", sched, s)
			}
			if *sched.deploy.Spec.Replicas != 1 {
				t.Errorf("%s: per-service replicas 1 did not override defaults.replicas 2", sched)
			}
			for _, w := range r.workloads() {
				env := envOf(w.pod.Spec.Containers[0])
				if ref := env["REDIS_URL"].ValueFrom.SecretKeyRef; ref.Name != "hero-redis-credentials" || ref.Key != "url" {
					t.Errorf("%s: REDIS_URL from %s/%s, want hero-redis-credentials/url", w, ref.Name, ref.Key)
				}
				tsc := w.pod.Spec.TopologySpreadConstraints
				if len(tsc) != 1 || tsc[0].LabelSelector == nil || tsc[0].LabelSelector.MatchLabels[labelComponent] != w.pod.Labels[labelComponent] {
					t.Errorf("%s: topologySpreadConstraints without the service's own labelSelector: %+v", w, tsc)
				}
				if env["POD_NAME"].ValueFrom == nil || env["SSL_CERT_FILE"].Value != "/etc/hero/ca/ca.crt" {
					t.Errorf("%s: defaults.env / defaults.extraEnv not rendered", w)
				}
			}
			sd := mustComponent(t, r, "supervisor-daemon")
			if ref := envOf(sd.pod.Spec.Containers[0])["HERO_ADMIN_SECRET"].ValueFrom.SecretKeyRef; ref.Name != "hero-admin-credentials" || ref.Key != "token" {
				t.Errorf("%s: HERO_ADMIN_SECRET from %s/%s, want hero-admin-credentials/token", sd, ref.Name, ref.Key)
			}
			pub := r.service(full + "-supervisor-daemon-public")
			if pub == nil || pub.Spec.Type != corev1.ServiceTypeLoadBalancer || len(pub.Spec.Ports) != 2 {
				t.Fatalf("public Service: want a LoadBalancer with http and grpc, got %+v", pub)
			}
			for _, p := range pub.Spec.Ports {
				if p.NodePort == 0 {
					t.Errorf("public Service: port %s without the configured nodePort", p.Name)
				}
			}
			for _, p := range r.pdbs() {
				if p.Name == full+"-scheduler" {
					t.Error("PDB of the scheduler rendered although its pdb.enabled is false")
				}
				if p.Name == full+"-supervisor-daemon" && (p.Spec.MinAvailable == nil || p.Spec.MinAvailable.StrVal != "50%") {
					t.Errorf("PDB %s: want minAvailable 50%%", p.Name)
				}
			}
			for _, np := range r.networkPolicies() {
				if len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Egress) == 0 {
					t.Errorf("NetworkPolicy %s: egress enabled but not restricted", np.Name)
				}
			}
			h := r.hpas()[0]
			if len(h.Spec.Metrics) != 2 || h.Spec.Behavior == nil || h.Spec.Behavior.ScaleDown == nil {
				t.Errorf("HPA %s: want cpu+memory metrics and scaleDown behavior", h.Name)
			}
			if ref := h.Spec.ScaleTargetRef; ref.Kind != "StatefulSet" || ref.Name != full+"-runner" {
				t.Errorf("HPA %s: scales %s %s, want the runner StatefulSet", h.Name, ref.Kind, ref.Name)
			}
			wantSeccomp(t, r, corev1.SeccompProfileTypeUnconfined, "")
			if _, c := runnerContainer(t, r); c.SecurityContext.AppArmorProfile == nil || c.SecurityContext.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
				t.Errorf("runner: AppArmor profile %+v, want Unconfined", c.SecurityContext.AppArmorProfile)
			}
			j := wantPKIJob(t, r, true, false)
			if j.prefix != full || j.days != 90 {
				t.Errorf("PKI Job: --prefix %q --days %d, want %s and 90", j.prefix, j.days, full)
			}
			for _, h := range []string{full + "-supervisor-daemon.hero.svc.corp.internal", full + "-supervisor-daemon-public", full + "-supervisor-daemon-public.hero.svc.corp.internal", "hero.example.com", "203.0.113.10"} {
				if !slices.Contains(j.args["--api-host"], h) {
					t.Errorf("PKI Job: --api-host %v lacks %s", j.args["--api-host"], h)
				}
			}
			job := r.jobs()[0].Spec.Template.Spec
			if c := job.Containers[0]; c.Image != "ghcr.io/hero-coordinator/supervisor-daemon:0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("PKI Job: image %s (%s), want the supervisor-daemon's with pkiJob.image's pull policy", c.Image, c.ImagePullPolicy)
			}
			if job.NodeSelector["kubernetes.io/os"] != "linux" || len(job.ImagePullSecrets) != 1 || r.jobs()[0].Spec.Template.Annotations["sidecar.istio.io/inject"] != "false" {
				t.Errorf("PKI Job: pkiJob settings or imagePullSecrets not rendered")
			}
			sm := r.serviceMonitors()[0]
			if sm.Labels["release"] != "kube-prometheus-stack" || len(sm.Spec.Endpoints[0].RelabelConfigs) != 1 || len(sm.Spec.Endpoints[0].MetricRelabelConfigs) != 1 {
				t.Errorf("ServiceMonitor %s: labels or relabelings missing", sm.Name)
			}
		},
	},

	"sandbox-values": {
		kinds: defaultKinds,
		check: func(t *testing.T, r *release, _ string) {
			wantEnv(t, r, "runner", map[string]string{"SANDBOX": "bwrap", "JOB_MEMORY": "512MiB", "JOB_PIDS": "128", "JOB_CPU": "500", "JOB_FILE_SIZE": "64MiB", "SANDBOX_BIND": "/scratch"})
			wantSeccomp(t, r, corev1.SeccompProfileTypeLocalhost, "operator/hero/hero-runner.json")
			runner, c := runnerContainer(t, r)
			if a := c.SecurityContext.AppArmorProfile; a == nil || a.Type != corev1.AppArmorProfileTypeLocalhost || a.LocalhostProfile == nil || *a.LocalhostProfile != "hero-runner" {
				t.Errorf("%s: AppArmor profile %+v, want Localhost hero-runner", runner, a)
			}
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/scratch" && !m.ReadOnly }) {
				t.Errorf("%s: SANDBOX_BIND /scratch is not a writable mount", runner)
			}
			if runner.pod.Spec.NodeSelector["hero.example.com/user-namespaces"] != "true" {
				t.Errorf("%s: nodeSelector not rendered", runner)
			}
			sts := runner.sts
			if len(sts.Spec.VolumeClaimTemplates) != 1 {
				t.Fatalf("%s: want the state claim template", runner)
			}
			pvc := sts.Spec.VolumeClaimTemplates[0]
			if pvc.Name != "state" || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast-ssd" || pvc.Spec.Resources.Requests.Storage().String() != "2Gi" || pvc.Annotations["backup.example.com/enabled"] != "false" {
				t.Errorf("%s: claim template %s %+v", runner, pvc.Name, pvc.Spec)
			}
			if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != "Retain" || p.WhenScaled != "Delete" {
				t.Errorf("%s: claim retention policy %+v, want Retain when deleted, Delete when scaled", runner, p)
			}
			for comp, n := range map[string]int32{"runner": 3, "router": 2} {
				if w := mustComponent(t, r, comp); w.replicas() == nil || *w.replicas() != n {
					t.Errorf("%s: replicas %v, want %d", w, w.replicas(), n)
				}
			}
		},
	},

	"sandbox-off-values": {
		kinds: defaultKinds,
		check: func(t *testing.T, r *release, _ string) {
			wantEnv(t, r, "runner", map[string]string{"SANDBOX": "none", "JOB_MEMORY": "1GiB"})
			wantSeccomp(t, r, corev1.SeccompProfileTypeRuntimeDefault, "")
			runner, c := runnerContainer(t, r)
			if runner.pod.Spec.HostUsers != nil || c.SecurityContext.ProcMount != nil {
				t.Errorf("%s: hostUsers %v, procMount %v with the sandbox off; want neither", runner, runner.pod.Spec.HostUsers, c.SecurityContext.ProcMount)
			}
		},
	},

	"servicemonitor-auto-values": {
		kinds:          defaultKinds,
		serviceMonitor: smWithCRD,
	},

	"certmanager-values": {
		kinds: withKinds(defaultKinds, map[string]int{"Certificate": 9, "Issuer": 2}),
		check: func(t *testing.T, r *release, _ string) {
			wantPKIJob(t, r, false, true)
			ca := r.issuer(rel + "-ca")
			if ca == nil || ca.Spec.CA == nil || ca.Spec.CA.SecretName != rel+"-ca" {
				t.Fatalf("no CA Issuer %s-ca on the Secret %s-ca", rel, rel)
			}
			for _, c := range r.certificates() {
				if c.Spec.IsCA {
					continue
				}
				if c.Spec.IssuerRef.Name != rel+"-ca" || c.Spec.Duration.Duration.String() != "720h0m0s" || c.Spec.RenewBefore.Duration.String() != "240h0m0s" {
					t.Errorf("Certificate %s: issuer %s, duration %v, renewBefore %v", c.Name, c.Spec.IssuerRef.Name, c.Spec.Duration, c.Spec.RenewBefore)
				}
			}
			for _, c := range r.certificates() {
				if c.Name == rel+"-api-tls" && (!slices.Contains(c.Spec.DNSNames, "hero.example.com") || !slices.Contains(c.Spec.DNSNames, rel+"-supervisor-daemon.hero.svc.cluster.local")) {
					t.Errorf("Certificate %s: dnsNames %v lack the API's names", c.Name, c.Spec.DNSNames)
				}
			}
			wantRedisURLs(t, r, "rediss://%s@"+rel+"-redis:6379/0")
		},
	},

	"tls-off-values": {
		kinds: defaultKinds,
		check: func(t *testing.T, r *release, _ string) {
			wantPKIJob(t, r, false, true)
			if len(r.certificates()) != 0 {
				t.Error("Certificates rendered with tls.enabled=false")
			}
			wantRedisURLs(t, r, "redis://%s@"+rel+"-redis:6379/0")
		},
	},

	"external-redis-acl-values": {
		kinds:   withKinds(defaultKinds, map[string]int{"Service": 8, "StatefulSet": 2, "Certificate": 8, "NetworkPolicy": 5}),
		outside: outside{issuers: []string{"ClusterIssuer/corp-ca"}},
		check: func(t *testing.T, r *release, _ string) {
			wantPKIJob(t, r, false, true)
			wantRedisURLs(t, r, "rediss://%s@redis.databases.svc.cluster.local:6380/0")
			for _, c := range r.certificates() {
				if ref := c.Spec.IssuerRef; ref.Name != "corp-ca" || ref.Kind != "ClusterIssuer" {
					t.Errorf("Certificate %s: issuer %s/%s, want ClusterIssuer/corp-ca", c.Name, ref.Kind, ref.Name)
				}
			}
		},
	},
}

func mustComponent(t *testing.T, r *release, comp string) workload {
	t.Helper()
	w, ok := r.component(comp)
	if !ok {
		t.Fatalf("no workload for component %s", comp)
	}
	return w
}

func mustRedis(t *testing.T, r *release) *appsv1.StatefulSet {
	t.Helper()
	sts := r.redis()
	if sts == nil {
		t.Fatal("no bundled Redis StatefulSet")
	}
	return sts
}

// redisArg returns the value after flag in the Redis container's args.
func redisArg(sts *appsv1.StatefulSet, flag string) string {
	args := sts.Spec.Template.Spec.Containers[0].Args
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// wantEnv checks plain env values of a component's container.
func wantEnv(t *testing.T, r *release, comp string, want map[string]string) {
	t.Helper()
	w := mustComponent(t, r, comp)
	env := envOf(w.pod.Spec.Containers[0])
	for k, v := range want {
		if got := env[k]; got.Value != v {
			t.Errorf("%s: %s=%q, want %q", w, k, got.Value, v)
		}
	}
}

// wantRedisURLs checks the URL each service reads (from its Secret or plain):
// want, with %s replaced by the service's name when it has one.
func wantRedisURLs(t *testing.T, r *release, want string) {
	t.Helper()
	for _, d := range r.heroWorkloads() {
		comp := d.pod.Labels[labelComponent]
		w := want
		if strings.Contains(want, "%s") {
			w = fmt.Sprintf(want, comp)
		}
		e := envOf(d.pod.Spec.Containers[0])["REDIS_URL"]
		got := e.Value
		if e.ValueFrom != nil {
			ref := e.ValueFrom.SecretKeyRef
			s := r.secret(ref.Name)
			if s == nil {
				t.Errorf("%s: REDIS_URL Secret %s not rendered", d, ref.Name)
				continue
			}
			got = string(s.Data[ref.Key])
		}
		if got != w {
			t.Errorf("%s: REDIS_URL %q, want %q", d, redact(got), redact(w))
		}
	}
}
