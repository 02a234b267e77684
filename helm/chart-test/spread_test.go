package charttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// checkSpread: every Hero service spreads its replicas (at least one
// topologySpreadConstraint, in every scenario), and each constraint's labelSelector
// picks exactly that workload's pods: a selector that matched another service's
// pods would count them in the skew.
func checkSpread(t *testing.T, r *release) {
	t.Helper()
	for _, w := range r.heroWorkloads() {
		tscs := w.pod.Spec.TopologySpreadConstraints
		if len(tscs) == 0 {
			t.Errorf("%s: no topologySpreadConstraints: its replicas may all land on one node", w)
		}
		for _, tsc := range tscs {
			sel, err := mustSelector(tsc.LabelSelector)
			if err != nil {
				t.Errorf("%s: topologySpreadConstraint over %s: %v", w, tsc.TopologyKey, err)
				continue
			}
			if got := r.selectedWorkloads(sel); len(got) != 1 || got[0].name != w.name || !sel.Matches(labels.Set(w.pod.Labels)) {
				t.Errorf("%s: topologySpreadConstraint over %s selects %v, want only its own pods", w, tsc.TopologyKey, got)
			}
		}
	}
}

// TestDefaultSpread: with the chart's defaults every service's replicas spread over
// nodes and zones, softly (a one-node cluster still schedules them all).
func TestDefaultSpread(t *testing.T) {
	objs, err := decodeFile(filepath.Join(renderedDir(t), "default-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := &release{objs: objs}
	ws := r.heroWorkloads()
	if len(ws) != len(components) {
		t.Fatalf("%d service workloads rendered, want %d", len(ws), len(components))
	}
	for _, w := range ws {
		keys := map[string]bool{}
		for _, tsc := range w.pod.Spec.TopologySpreadConstraints {
			if tsc.MaxSkew != 1 || tsc.WhenUnsatisfiable != corev1.ScheduleAnyway {
				t.Errorf("%s: spread over %s is maxSkew %d, %s; want 1, ScheduleAnyway", w, tsc.TopologyKey, tsc.MaxSkew, tsc.WhenUnsatisfiable)
			}
			keys[tsc.TopologyKey] = true
		}
		for _, k := range []string{corev1.LabelHostname, corev1.LabelTopologyZone} {
			if !keys[k] {
				t.Errorf("%s: not spread over %s by default", w, k)
			}
		}
	}
}

// TestNotesSayImagesMustBeBuilt: until the images are published, the install notes
// say to build and push them, and warn while the registry is the chart's default.
// helm renders NOTES.txt only at install, which needs a cluster: the test renders it
// offline from a copy of the chart where a ConfigMap holds it.
func TestNotesSayImagesMustBeBuilt(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "hero")
	if err := os.CopyFS(chart, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(chart, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wrapper := `{{- define "charttest.notes" }}` + string(notes) + `{{- end }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: notes
data:
  notes: {{ include "charttest.notes" . | quote }}
`
	if err := os.WriteFile(filepath.Join(chart, "templates", "zz-notes.yaml"), []byte(wrapper), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set      []string
		warn     bool
		registry string
	}{
		{nil, true, "ghcr.io/hero-coordinator/supervisor-daemon:"},
		{[]string{"--set", "defaults.image.registry=registry.example.com"}, false, "registry.example.com/hero-coordinator/supervisor-daemon:"},
	} {
		args := append([]string{"template", rel, chart, "--namespace", "hero", "--kube-version", kubeVersion, "--show-only", "templates/zz-notes.yaml"}, tc.set...)
		out, ok := runHelm(t, args...)
		if !ok {
			t.Fatalf("helm %s: %s", strings.Join(args, " "), out)
		}
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(out), &cm); err != nil {
			t.Fatalf("the rendered notes: %v\n%s", err, out)
		}
		text := cm.Data["notes"]
		for _, want := range []string{"no Hero image is published yet", "scripts/build-images.sh --registry REGISTRY --push", tc.registry} {
			if !strings.Contains(text, want) {
				t.Errorf("%v: the notes lack %q:\n%s", tc.set, want, text)
			}
		}
		if got := strings.Contains(text, "WARNING: defaults.image.registry is the chart's default"); got != tc.warn {
			t.Errorf("%v: registry warning shown=%v, want %v", tc.set, got, tc.warn)
		}
	}
}
