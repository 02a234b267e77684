package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"gopkg.in/yaml.v3"
)

// A flow submitted from a pasted flow file (the YAML of `heroctl flow submit`,
// examples/*.yaml; a job's file: cannot be read from the browser, its script: can).
// The jobs are made level by level with job.create, then flow.create and flow.start:
// the API's own methods, checked as they are.

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
	Function string            `yaml:"function"`
	Args     []any             `yaml:"args"`
	Kwargs   map[string]any    `yaml:"kwargs"`
	Depends  []string          `yaml:"depends"`
	Env      map[string]string `yaml:"env"`
	Timeout  uint32            `yaml:"timeout"`
	Retries  uint8             `yaml:"retries"`
	Runner   uint32            `yaml:"runner"`
}

// maxFlowFileJobs bounds a pasted flow (larger ones: heroctl or the SDKs).
const maxFlowFileJobs = 1000

// parseFlowFile reads a flow file and orders its jobs after their dependencies.
func parseFlowFile(src string) (*flowFile, []int, error) {
	var f flowFile
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("the flow file: %v", err)
	}
	if len(f.Jobs) == 0 {
		return nil, nil, errors.New("the flow file has no jobs (a flow file lists them under jobs:)")
	}
	if len(f.Jobs) > maxFlowFileJobs {
		return nil, nil, fmt.Errorf("the flow file has %d jobs; the console takes %d at most (heroctl flow submit takes more)", len(f.Jobs), maxFlowFileJobs)
	}
	byName := map[string]int{}
	for i, j := range f.Jobs {
		switch {
		case j.Name == "":
			return nil, nil, fmt.Errorf("job %d has no name", i+1)
		case byName[j.Name] != 0:
			return nil, nil, fmt.Errorf("job %q is named twice", j.Name)
		case j.Function == "" && (j.Type == "" || j.Script == ""):
			return nil, nil, fmt.Errorf("job %q needs type: and script: (file: cannot be read from the console), or function:", j.Name)
		}
		byName[j.Name] = i + 1
	}
	order, err := topo(f.Jobs, byName)
	return &f, order, err
}

// topo orders the jobs so that each follows its dependencies, or says which are
// unknown or in a cycle.
func topo(jobs []flowFileJob, byName map[string]int) ([]int, error) {
	state := make([]int, len(jobs)) // 0 new, 1 visiting, 2 done
	var order []int
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 1:
			return fmt.Errorf("job %q depends on itself through a cycle", jobs[i].Name)
		case 2:
			return nil
		}
		state[i] = 1
		for _, d := range jobs[i].Depends {
			k := byName[d]
			if k == 0 {
				return fmt.Errorf("job %q depends on %q, which is not in the file", jobs[i].Name, d)
			}
			if err := visit(k - 1); err != nil {
				return err
			}
		}
		state[i] = 2
		order = append(order, i)
		return nil
	}
	for i := range jobs {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}

type submitRequest struct {
	ContextID uint32 `json:"context_id"`
	FlowFile  string `json:"flow_file"`
}

func (c *Console) submit(w http.ResponseWriter, r *http.Request) {
	var in submitRequest
	if !decodeBody(w, r, &in) {
		return
	}
	if in.ContextID == 0 {
		fail(w, http.StatusBadRequest, "context_id is required")
		return
	}
	f, order, err := parseFlowFile(in.FlowFile)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	id := sessionOf(r).identity()
	ids := make([]uint32, len(f.Jobs))
	byName := map[string]int{}
	for i, j := range f.Jobs {
		byName[j.Name] = i
	}
	flowJobs := make([]uint32, 0, len(order))
	for _, i := range order {
		j := f.Jobs[i]
		job := map[string]any{"script_type": j.Type, "script": j.Script, "timeout": j.Timeout, "retries": j.Retries, "env_vars": j.Env, "runner_id": j.Runner}
		if j.Function != "" {
			job["function_name"] = j.Function
			if j.Args != nil {
				job["args"] = j.Args
			}
			if j.Kwargs != nil {
				job["kwargs"] = j.Kwargs
			}
		}
		deps := []uint32{}
		for _, d := range j.Depends {
			deps = append(deps, ids[byName[d]])
		}
		job["dependends"] = deps
		out, err := c.b.Call(r.Context(), id, "job.create", map[string]any{"context_id": in.ContextID, "job": job})
		if err != nil {
			failStep(w, "job "+j.Name, err)
			return
		}
		var made struct {
			ID uint32 `json:"id"`
		}
		if err := json.Unmarshal(out, &made); err != nil {
			fail(w, http.StatusInternalServerError, err.Error())
			return
		}
		ids[i] = made.ID
		flowJobs = append(flowJobs, made.ID)
	}
	out, err := c.b.Call(r.Context(), id, "flow.create", map[string]any{"context_id": in.ContextID, "flow": map[string]any{"id": f.ID, "jobs": flowJobs, "env_vars": f.Env}})
	if err != nil {
		failStep(w, "flow", err)
		return
	}
	var flow struct {
		ID uint32 `json:"id"`
	}
	if err := json.Unmarshal(out, &flow); err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	if out, err = c.b.Call(r.Context(), id, "flow.start", map[string]any{"context_id": in.ContextID, "id": flow.ID}); err != nil {
		failStep(w, fmt.Sprintf("start flow %d", flow.ID), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"flow": json.RawMessage(out)})
}

func failStep(w http.ResponseWriter, step string, err error) {
	var ae *APIError
	if errors.As(err, &ae) {
		failAPI(w, &APIError{Code: ae.Code, Message: step + ": " + ae.Message})
		return
	}
	failAPI(w, fmt.Errorf("%s: %w", step, err))
}
