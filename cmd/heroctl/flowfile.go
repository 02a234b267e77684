package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

// flowFile is the YAML of `heroctl flow submit` (examples/*.yaml).
type flowFile struct {
	Name string            `yaml:"name"`
	ID   uint32            `yaml:"id"`
	Env  map[string]string `yaml:"env"`
	Jobs []flowFileJob     `yaml:"jobs"`
}

type flowFileJob struct {
	Name     string            `yaml:"name"`
	Type     string            `yaml:"type"`
	Script   string            `yaml:"script"`
	File     string            `yaml:"file"`
	Function string            `yaml:"function"` // a handler job: executor#handler
	Args     []any             `yaml:"args"`
	Kwargs   map[string]any    `yaml:"kwargs"`
	Depends  []string          `yaml:"depends"`
	Env      map[string]string `yaml:"env"`
	Timeout  uint32            `yaml:"timeout"`
	Retries  uint8             `yaml:"retries"`
	Runner   uint32            `yaml:"runner"`
}

// fileError is a flow-file error at a line: "FILE:LINE: msg".
func fileError(path string, line int, format string, a ...any) error {
	if line == 0 {
		return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, a...))
	}
	return fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, a...))
}

// loadFlowFile reads and checks a flow file and returns the flow to submit.
func loadFlowFile(path string) (*hero.FlowSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(path, err)
	}
	var f flowFile
	lines := map[int]int{} // job index → its line
	if len(doc.Content) > 0 {
		if err := checkFields(path, doc.Content[0], lines); err != nil {
			return nil, err
		}
		if err := doc.Content[0].Decode(&f); err != nil {
			return nil, yamlError(path, err)
		}
	}
	if len(f.Jobs) == 0 {
		return nil, fileError(path, 0, "no jobs (a flow file lists them under jobs:)")
	}
	spec := &hero.FlowSpec{ID: f.ID, Env: f.Env}
	for i := range f.Jobs {
		j, err := f.Jobs[i].job(filepath.Dir(path))
		if err != nil {
			return nil, fileError(path, lines[i], "job %s: %v", jobLabel(f.Jobs[i], i), err)
		}
		spec.Jobs = append(spec.Jobs, hero.FlowJob{Name: f.Jobs[i].Name, Depends: f.Jobs[i].Depends, Job: *j})
	}
	if _, err := spec.Order(); err != nil {
		return nil, fileError(path, 0, "%v", err)
	}
	return spec, nil
}

func jobLabel(j flowFileJob, i int) string {
	if j.Name != "" {
		return fmt.Sprintf("%q", j.Name)
	}
	return fmt.Sprintf("%d", i+1)
}

// job checks one job of the file and makes it (a file: is read relative to dir).
func (j *flowFileJob) job(dir string) (*model.Job, error) {
	out := &model.Job{ScriptType: model.ScriptType(j.Type), Script: j.Script, Timeout: j.Timeout, Retries: j.Retries,
		EnvVars: j.Env, RunnerID: j.Runner, FunctionName: j.Function}
	if j.Name == "" {
		return nil, errors.New("has no name")
	}
	if j.Function != "" {
		return j.handler(out)
	}
	if len(j.Args) > 0 || len(j.Kwargs) > 0 {
		return nil, errors.New("args and kwargs belong to a handler job (function)")
	}
	if j.Type == "" {
		return nil, errors.New("has no type (python, sh, bash, …)")
	}
	if (j.Script == "") == (j.File == "") {
		return nil, errors.New("needs exactly one of script and file")
	}
	if j.File != "" {
		p := j.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out.Script = string(src)
	}
	return out, nil
}

func (j *flowFileJob) handler(out *model.Job) (*model.Job, error) {
	if j.Script != "" || j.File != "" {
		return nil, errors.New("a handler job (function) has no script or file")
	}
	if j.Args != nil {
		b, err := json.Marshal(j.Args)
		if err != nil {
			return nil, fmt.Errorf("args: %v", err)
		}
		out.Args = b
	}
	if j.Kwargs != nil {
		b, err := json.Marshal(j.Kwargs)
		if err != nil {
			return nil, fmt.Errorf("kwargs: %v", err)
		}
		out.Kwargs = b
	}
	return out, nil
}

// checkFields refuses unknown keys with their line and the nearest valid field, and
// records each job's line.
func checkFields(path string, root *yaml.Node, lines map[int]int) error {
	if root.Kind != yaml.MappingNode {
		return fileError(path, root.Line, "a flow file is a mapping (name:, env:, jobs:)")
	}
	if err := knownKeys(path, root, "the flow", yamlFields(flowFile{})); err != nil {
		return err
	}
	jobs := mapValue(root, "jobs")
	if jobs == nil || jobs.Kind != yaml.SequenceNode {
		return nil
	}
	for i, n := range jobs.Content {
		lines[i] = n.Line
		if n.Kind != yaml.MappingNode {
			return fileError(path, n.Line, "job %d: a job is a mapping (name:, type:, script:, …)", i+1)
		}
		if err := knownKeys(path, n, fmt.Sprintf("job %d", i+1), yamlFields(flowFileJob{})); err != nil {
			return err
		}
	}
	return nil
}

func knownKeys(path string, m *yaml.Node, where string, known []string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if !contains(known, k.Value) {
			return fileError(path, k.Line, "%s: unknown field %q%s (fields: %s)", where, k.Value, suggest(k.Value, known), strings.Join(known, ", "))
		}
	}
	return nil
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// yamlFields are a struct's YAML field names.
func yamlFields(v any) []string {
	t := reflect.TypeOf(v)
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		out = append(out, strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0])
	}
	return out
}

// suggest is `; did you mean "x"?` for the nearest known name, when it is near.
func suggest(s string, known []string) string {
	best, bestD := "", len(s)/2+2
	for _, k := range known {
		if d := editDistance(s, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the Damerau–Levenshtein distance (adjacent swaps count one).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

var yamlLine = regexp.MustCompile(`line (\d+): `)

// yamlError turns yaml's "yaml: unmarshal errors:\n  line 5: cannot unmarshal …"
// into "FILE:5: cannot unmarshal …".
func yamlError(path string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	msg = strings.TrimSpace(msg)
	if m := yamlLine.FindStringSubmatchIndex(msg); m != nil && m[0] == 0 {
		return fmt.Errorf("%s:%s: %s", path, msg[m[2]:m[3]], msg[m[1]:])
	}
	return fmt.Errorf("%s: %s", path, msg)
}
