package charttest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/hero-coordinator/hero/helm/chart-test/schemagen"
)

const (
	schemaSrc  = "schema/values.schema.src.yaml"
	schemaFile = chartDir + "/values.schema.json"
)

var serviceBlocks = []string{"supervisorDaemon", "scheduler", "router", "runner", "myceliumGateway"}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s: %v", schemaFile, err)
	}
	return s
}

// TestSchemaUpToDate: values.schema.json is what genschema makes of its source.
func TestSchemaUpToDate(t *testing.T) {
	src, err := os.ReadFile(schemaSrc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := schemagen.Generate(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: regenerate it with `cd helm/chart-test && go run ./cmd/genschema`", schemaFile)
	}
}

// TestSchemaClosed: every object in the schema is closed (additionalProperties
// false, or a schema for map values); nothing is left open.
func TestSchemaClosed(t *testing.T) {
	s := loadSchema(t)
	if s["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema is %v, want draft-07", s["$schema"])
	}
	var walk func(path string, n any)
	walk = func(path string, n any) {
		switch x := n.(type) {
		case map[string]any:
			_, hasProps := x["properties"]
			if x["type"] == "object" || hasProps {
				switch ap := x["additionalProperties"].(type) {
				case bool:
					if ap {
						t.Errorf("%s: additionalProperties: true", path)
					}
				case map[string]any:
					if len(ap) == 0 {
						t.Errorf("%s: additionalProperties: {} accepts anything", path)
					}
				default:
					t.Errorf("%s: object without additionalProperties", path)
				}
			}
			for k, v := range x {
				walk(path+"/"+k, v)
			}
		case []any:
			for i, v := range x {
				walk(path+"/"+strconv.Itoa(i), v)
			}
		}
	}
	walk("#", s)
}

// TestSchemaServiceBlocks: every service block accepts exactly the keys of
// `defaults` (with the same schema, image aside) plus its own.
func TestSchemaServiceBlocks(t *testing.T) {
	props := loadSchema(t)["properties"].(map[string]any)
	defaults := props["defaults"].(map[string]any)["properties"].(map[string]any)
	for _, b := range serviceBlocks {
		own := props[b].(map[string]any)["properties"].(map[string]any)
		for k, v := range defaults {
			if k == "image" {
				continue
			}
			if !reflect.DeepEqual(own[k], v) {
				t.Errorf("%s.%s: schema differs from defaults.%s", b, k, k)
			}
		}
		for _, k := range []string{"enabled", "image", "ports"} {
			if _, ok := own[k]; !ok {
				t.Errorf("%s: no %s in the schema", b, k)
			}
		}
	}
}

// TestValuesDocumented: every key of values.yaml is in the README's table.
func TestValuesDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllSubmatch(readme, -1) {
		documented[string(m[1])] = true
	}
	var missing []string
	for _, k := range leafKeys("", v) {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("values not in the README's table (a row starting with | `key` |):\n  %s", strings.Join(missing, "\n  "))
	}
	for k := range documented {
		if !hasPath(v, k) && !strings.HasPrefix(k, "<service>.") {
			t.Errorf("README documents %q, which values.yaml does not have", k)
		}
	}
}

// leafKeys lists the dotted paths of values.yaml down to scalars, lists and empty maps.
func leafKeys(prefix string, v map[string]any) []string {
	var out []string
	for k, val := range v {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if m, ok := val.(map[string]any); ok && len(m) > 0 && !isLeafMap(p) {
			out = append(out, leafKeys(p, m)...)
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Maps documented as one value (Kubernetes objects given whole).
func isLeafMap(path string) bool {
	for _, suffix := range []string{"resources", "strategy", "podSecurityContext", "securityContext"} {
		if strings.HasSuffix(path, "."+suffix) {
			return true
		}
	}
	return false
}

func hasPath(v map[string]any, path string) bool {
	cur := any(v)
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}

// TestPortsMatchDocs: the ports the tests expect are those of docs/ports.md.
func TestPortsMatchDocs(t *testing.T) {
	raw, err := os.ReadFile("../../docs/ports.md")
	if err != nil {
		t.Skipf("docs/ports.md not found (%v): module used outside the repository", err)
	}
	row := regexp.MustCompile("(?m)^\\| ([a-z-]+) \\| ([0-9]+) \\|.*`([A-Z_]+)` \\|$")
	seen := 0
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		comp, ok := components[m[1]]
		if !ok {
			continue
		}
		port, _ := strconv.Atoi(m[2])
		var name string
		for n, env := range comp.addrEnv {
			if env == m[3] {
				name = n
			}
		}
		if name == "" || comp.ports[name] != int32(port) {
			t.Errorf("docs/ports.md: %s %s on %d, the tests expect %v", m[1], m[3], port, comp.ports)
		}
		seen++
	}
	if want := 11; seen != want {
		t.Errorf("docs/ports.md: %d service port rows found, want %d", seen, want)
	}
	// values.yaml must carry the same defaults.
	var v map[string]any
	vals, _ := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err := yaml.Unmarshal(vals, &v); err != nil {
		t.Fatal(err)
	}
	for _, b := range serviceBlocks {
		comp := components[kebab(b)]
		ports, _ := v[b].(map[string]any)["ports"].(map[string]any)
		got := map[string]int32{}
		for k, p := range ports {
			got[k] = int32(p.(float64))
		}
		if !reflect.DeepEqual(got, comp.ports) {
			t.Errorf("values.yaml %s.ports = %v, docs say %v", b, got, comp.ports)
		}
	}
}

func kebab(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('-')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestCallersMatchServices: the callers each NetworkPolicy admits are the peers
// each service's gRPC server admits by certificate, for any of its methods
// (app.Serving{Peers: map[string][]string{method: {…}, …}} in
// services/<name>/service.go).
func TestCallersMatchServices(t *testing.T) {
	block := regexp.MustCompile(`(?s)Peers: map\[string\]\[\]string\{(.*?)\}\}\)`)
	list := regexp.MustCompile(`\{([^{}]*)\}`)
	for name, comp := range components {
		if name == "supervisor-daemon" {
			continue // its gRPC port is the public API
		}
		src, err := os.ReadFile(filepath.Join("../../services", name, "service.go"))
		if err != nil {
			t.Skipf("services/%s/service.go not found (%v): module used outside the repository", name, err)
		}
		m := block.FindSubmatch(src)
		if m == nil {
			t.Errorf("services/%s/service.go: no Peers map", name)
			continue
		}
		var got []string
		for _, l := range list.FindAllSubmatch(m[1], -1) {
			for _, p := range strings.Split(string(l[1]), ",") {
				if p = strings.Trim(strings.TrimSpace(p), `"`); p != "" && !slices.Contains(got, p) {
					got = append(got, p)
				}
			}
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, comp.callers) {
			t.Errorf("%s: the service admits %v, the chart's NetworkPolicy test expects %v", name, got, comp.callers)
		}
	}
}
