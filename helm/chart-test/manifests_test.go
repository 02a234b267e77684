package charttest

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	chartDir = "../hero"
	// Suffix of the files rendered with --api-versions monitoring.coreos.com/v1/ServiceMonitor.
	withCRDSuffix = "+monitoring"
)

// renderedDir is where scripts/helm-check.sh put `helm template`'s output: one
// <scenario>.yaml and one <scenario>+monitoring.yaml per ci/<scenario>.yaml.
func renderedDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("HELM_RENDERED_DIR")
	if dir == "" {
		skipOrFail(t, "HELM_RENDERED_DIR is not set: these tests read manifests rendered by helm; run `bash scripts/helm-check.sh` from the repository root")
	}
	return dir
}

// ciScenarios lists the chart's ci/*.yaml files by name without .yaml.
func ciScenarios(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files in %s/ci (%v)", chartDir, err)
	}
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	sort.Strings(out)
	return out
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml: no appVersion (%v)", err)
	}
	return c.AppVersion
}

// TestRenderedManifests decodes every rendered document strictly, runs the
// checks every scenario must pass, then the scenario's own expectations.
func TestRenderedManifests(t *testing.T) {
	dir := renderedDir(t)
	appVersion := chartAppVersion(t)
	for _, sc := range ciScenarios(t) {
		exp, ok := scenarios[sc]
		if !ok {
			t.Errorf("ci/%s.yaml has no expectations: add it to the scenarios table in scenarios_test.go", sc)
			continue
		}
		for _, withCRD := range []bool{false, true} {
			name := sc
			if withCRD {
				name += withCRDSuffix
			}
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(dir, name+".yaml")
				if _, err := os.Stat(path); err != nil {
					t.Fatalf("not rendered: %v (scripts/helm-check.sh renders every ci/*.yaml with and without the ServiceMonitor API)", err)
				}
				objs, err := decodeFile(path)
				if err != nil {
					t.Fatalf("strict decoding failed:\n%v", err)
				}
				if len(objs) == 0 {
					t.Fatal("nothing rendered")
				}
				r := &release{file: path, objs: objs}
				checkRelease(t, r, exp.outside)
				checkKinds(t, r, exp, withCRD)
				if exp.check != nil {
					exp.check(t, r, appVersion)
				}
			})
		}
	}
	// Rendered files without a scenario mean the script and ci/ disagree.
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".yaml"), withCRDSuffix)
		if _, ok := scenarios[base]; !ok {
			t.Errorf("%s: rendered, but no ci/%s.yaml scenario expects it", f, base)
		}
	}
}

func checkKinds(t *testing.T, r *release, exp scenario, withCRD bool) {
	t.Helper()
	want := map[string]int{}
	for k, v := range exp.kinds {
		want[k] = v
	}
	switch exp.serviceMonitor {
	case smAlways:
		want["ServiceMonitor"] = 1
	case smWithCRD:
		if withCRD {
			want["ServiceMonitor"] = 1
		}
	}
	got := map[string]int{}
	for _, o := range r.objs {
		got[o.Kind[strings.LastIndex(o.Kind, "/")+1:]]++
	}
	for _, k := range keysOf(mergeKeys(want, got)) {
		if got[k] != want[k] {
			t.Errorf("%d %s rendered, want %d", got[k], k, want[k])
		}
	}
}

func mergeKeys(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for k := range a {
		out[k] = 0
	}
	for k := range b {
		out[k] = 0
	}
	return out
}
