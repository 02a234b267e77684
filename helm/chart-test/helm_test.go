package charttest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// skipOrFail skips, or fails when HELM_CHECK_REQUIRE=1 (scripts/helm-check.sh
// sets it, so that nothing it means to test can quietly skip).
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("HELM_CHECK_REQUIRE") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// helmBin finds helm: $HELM_BIN, else helm on PATH; skips the test without it.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM_BIN"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		skipOrFail(t, "helm not found (set HELM_BIN or put helm on PATH; scripts/helm-check.sh installs it)")
	}
	return h
}

// runHelm runs helm with a fixed Kubernetes version so the output does not
// depend on how helm was built; returns combined output and whether it succeeded.
func runHelm(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err == nil
}

func writeValues(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const kubeVersion = "1.31.0"

// TestSchemaRejectsTypos: misspelt or mistyped values make `helm template` and
// `helm lint --strict` fail because of values.schema.json, naming the culprit.
func TestSchemaRejectsTypos(t *testing.T) {
	if out, ok := runHelm(t, "template", "hero", chartDir, "--kube-version", kubeVersion); !ok {
		t.Fatalf("helm template with the chart's defaults fails, so the cases below prove nothing:\n%s", out)
	}
	cases := []struct {
		name, values, want string
	}{
		{"replicaCount under a service", "runner:\n  replicaCount: 2\n", "additional properties 'replicaCount' not allowed"},
		{"imagee", "supervisorDaemon:\n  imagee:\n    tag: x\n", "additional properties 'imagee' not allowed"},
		{"unknown top-level key", "replicas: 3\n", "additional properties 'replicas' not allowed"},
		{"typo in defaults", "defaults:\n  resource: {}\n", "additional properties 'resource' not allowed"},
		{"typo inside resources", "defaults:\n  resources:\n    limit:\n      cpu: 1\n", "additional properties 'limit' not allowed"},
		{"typo deep in affinity", "scheduler:\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchExpresions: []\n", "additional properties 'matchExpresions' not allowed"},
		{"typo in bundled redis", "redis:\n  bundled:\n    persistance:\n      size: 1Gi\n", "additional properties 'persistance' not allowed"},
		{"typo in a NetworkPolicy peer", "networkPolicy:\n  apiFrom:\n    - podSelectr: {}\n", "additional properties 'podSelectr' not allowed"},
		{"wrong type", "runner:\n  concurrency: lots\n", "/runner/concurrency"},
		{"bad enum", "serviceMonitor:\n  enabled: yes please\n", "/serviceMonitor/enabled"},
		{"bad port", "scheduler:\n  ports:\n    grpc: 70000\n", "/scheduler/ports/grpc"},
		{"redis URL scheme", "redis:\n  bundled:\n    enabled: false\n  external:\n    url: http://redis:6379\n", "/redis/external/url"},
		{"the old requirepass password", "redis:\n  bundled:\n    auth:\n      password: x\n", "additional properties 'password' not allowed"},
		{"typo in tls", "tls:\n  certmanager:\n    enabled: true\n", "additional properties 'certmanager' not allowed"},
		{"issuer kind", "tls:\n  certManager:\n    issuerRef:\n      kind: Issuers\n", "/tls/certManager/issuerRef/kind"},
		{"cert-manager duration", "tls:\n  certManager:\n    duration: 90d\n", "/tls/certManager/duration"},
		{"API host with a scheme", "tls:\n  apiHosts: [https://hero.example.com]\n", "/tls/apiHosts/0"},
		{"sandbox mode", "runner:\n  sandbox:\n    mode: bubblewrap\n", "/runner/sandbox/mode"},
		{"job memory as a Kubernetes quantity", "runner:\n  sandbox:\n    limits:\n      memory: 1Gi\n", "/runner/sandbox/limits/memory"},
		{"absolute seccomp profile path", "runner:\n  sandbox:\n    seccompProfile:\n      localhostProfile: /var/lib/kubelet/seccomp/hero/seccomp-runner.json\n", "/runner/sandbox/seccompProfile/localhostProfile"},
		{"relative sandbox bind", "runner:\n  sandbox:\n    binds: [scratch]\n", "/runner/sandbox/binds/0"},
		{"typo in the sandbox", "runner:\n  sandbox:\n    seccomp:\n      type: Unconfined\n", "additional properties 'seccomp' not allowed"},
		{"claim retention", "runner:\n  persistence:\n    retentionPolicy:\n      whenScaled: Keep\n", "/runner/persistence/retentionPolicy/whenScaled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vf := writeValues(t, tc.values)
			for _, cmd := range [][]string{
				{"template", "hero", chartDir, "--kube-version", kubeVersion, "-f", vf},
				{"lint", "--strict", chartDir, "--kube-version", kubeVersion, "-f", vf},
			} {
				out, ok := runHelm(t, cmd...)
				if ok {
					t.Errorf("helm %s accepted:\n%s", cmd[0], tc.values)
					continue
				}
				if !strings.Contains(out, "schema") || !strings.Contains(out, tc.want) {
					t.Errorf("helm %s failed, but not with a schema error mentioning %q:\n%s", cmd[0], tc.want, out)
				}
			}
		})
	}
}

// TestTemplateRefusesContradictions: the chart's own checks (fail) for what a
// schema cannot express.
func TestTemplateRefusesContradictions(t *testing.T) {
	helmBin(t)
	cases := []struct {
		name, values, want string
		kube               string // --kube-version; "" = kubeVersion
	}{
		{"both Redis kinds", "redis:\n  external:\n    url: redis://r:6379/0\n", "choose one", ""},
		{"no Redis", "redis:\n  bundled:\n    enabled: false\n", "no Redis configured", ""},
		{"url and existingSecret", "redis:\n  bundled:\n    enabled: false\n  external:\n    url: redis://r:6379/0\n    existingSecret: s\n", "set only one", ""},
		{"disabled peer without address", "scheduler:\n  enabled: false\n", "scheduler is disabled", ""},
		{"HPA without a target", "runner:\n  autoscaling:\n    enabled: true\n    targetCPUUtilizationPercentage: 0\n", "targetCPUUtilizationPercentage", ""},
		{"aclUsers without a URL", "redis:\n  bundled:\n    enabled: false\n  external:\n    existingSecret: s\n    aclUsers: true\n", "aclUsers needs redis.external.url", ""},
		{"aclUsers with a password in the URL", "redis:\n  bundled:\n    enabled: false\n  external:\n    url: redis://u:p@r:6379/0\n    aclUsers: true\n", "without a user or password", ""},
		{"HPA min above max", "runner:\n  autoscaling:\n    enabled: true\n    minReplicas: 5\n    maxReplicas: 2\n", "minReplicas is greater than maxReplicas", ""},
		{"sandbox with RuntimeDefault seccomp", "runner:\n  sandbox:\n    seccompProfile:\n      type: RuntimeDefault\n", "runner.sandbox.mode=none", ""},
		{"Localhost seccomp without a profile", "runner:\n  sandbox:\n    seccompProfile:\n      localhostProfile: \"\"\n", "needs runner.sandbox.seccompProfile.localhostProfile", ""},
		{"Localhost AppArmor without a profile", "runner:\n  sandbox:\n    appArmorProfile:\n      type: Localhost\n", "needs runner.sandbox.appArmorProfile.localhostProfile", ""},
		{"sandbox before Kubernetes 1.31", "{}\n", "needs Kubernetes 1.31 or newer", "1.30.4"},
		{"ServiceMonitor that the NetworkPolicies keep out", "serviceMonitor:\n  enabled: true\n", "set networkPolicy.adminFrom to your Prometheus", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kube := tc.kube
			if kube == "" {
				kube = kubeVersion
			}
			out, ok := runHelm(t, "template", "hero", chartDir, "--kube-version", kube, "-f", writeValues(t, tc.values))
			if ok {
				t.Fatalf("helm template accepted:\n%s", tc.values)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("helm template failed without %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestSandboxOffOnOlderKubernetes: without the sandbox the chart still renders for
// the oldest Kubernetes it supports, with no user namespace or proc mount setting.
func TestSandboxOffOnOlderKubernetes(t *testing.T) {
	out, ok := runHelm(t, "template", "hero", chartDir, "--kube-version", "1.25.0", "-f", writeValues(t, "runner:\n  sandbox:\n    mode: none\n"))
	if !ok {
		t.Fatalf("helm template with runner.sandbox.mode=none for Kubernetes 1.25 failed:\n%s", out)
	}
	for _, s := range []string{"hostUsers", "procMount", "Localhost"} {
		if strings.Contains(out, s) {
			t.Errorf("rendered %s with the sandbox off", s)
		}
	}
	if !strings.Contains(out, "name: SANDBOX\n              value: \"none\"") {
		t.Error("SANDBOX=none not rendered")
	}
}
