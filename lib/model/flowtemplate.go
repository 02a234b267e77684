package model

import (
	"fmt"
	"strings"
)

// MaxTemplateJobs bounds the jobs of a schedule's flow template: the template is
// stored in the schedule's hash and read at each tick.
const MaxTemplateJobs = 10000

// FlowTemplate is a schedule's flow (a flow file, as `heroctl flow submit` takes it):
// each run creates a flow of these jobs, as a unit, and starts it.
type FlowTemplate struct {
	EnvVars map[string]string `json:"env_vars,omitempty"` // the flow's environment, given to every job
	Jobs    []TemplateJob     `json:"jobs"`
}

// TemplateJob is one job of a FlowTemplate: its name, the names of the jobs it depends
// on, and the job (job.submit's, without an id or dependencies).
type TemplateJob struct {
	Name    string   `json:"name"`
	Depends []string `json:"depends,omitempty"`
	Job     Job      `json:"job"`
}

// Order checks the template's names and dependencies and returns its jobs' indexes in
// an order where each job follows the ones it depends on (stable by position). The
// error names the field: flow.jobs[i].name or flow.jobs[i].depends.
func (t *FlowTemplate) Order() ([]int, error) {
	bad := func(field, format string, a ...any) error {
		return &ValidationError{Object: "schedule", Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	if len(t.Jobs) == 0 {
		return nil, bad("flow.jobs", "a flow needs at least one job")
	}
	if len(t.Jobs) > MaxTemplateJobs {
		return nil, bad("flow.jobs", "a schedule's flow of %d jobs is more than %d", len(t.Jobs), MaxTemplateJobs)
	}
	byName := make(map[string]int, len(t.Jobs))
	for i, j := range t.Jobs {
		switch {
		case j.Name == "":
			return nil, bad(fmt.Sprintf("flow.jobs[%d].name", i), "job %d has no name", i+1)
		case len(j.Name) > 200:
			return nil, bad(fmt.Sprintf("flow.jobs[%d].name", i), "job %d: a name of %d bytes (at most 200)", i+1, len(j.Name))
		}
		if _, dup := byName[j.Name]; dup {
			return nil, bad(fmt.Sprintf("flow.jobs[%d].name", i), "job name %q used twice", j.Name)
		}
		byName[j.Name] = i
	}
	for i, j := range t.Jobs {
		for _, d := range j.Depends {
			if _, ok := byName[d]; !ok {
				return nil, bad(fmt.Sprintf("flow.jobs[%d].depends", i), "job %q depends on %q, which is not a job of this flow", j.Name, d)
			}
		}
	}
	// Kahn's algorithm, stable by position.
	done := make([]bool, len(t.Jobs))
	order := make([]int, 0, len(t.Jobs))
	for len(order) < len(t.Jobs) {
		progress := false
		for i, j := range t.Jobs {
			if done[i] {
				continue
			}
			ready := true
			for _, d := range j.Depends {
				ready = ready && done[byName[d]]
			}
			if ready {
				done[i], progress = true, true
				order = append(order, i)
			}
		}
		if !progress {
			var left []string
			for i, j := range t.Jobs {
				if !done[i] {
					left = append(left, j.Name)
				}
			}
			return nil, bad("flow.jobs", "dependency cycle among jobs %s", strings.Join(left, ", "))
		}
	}
	return order, nil
}

// Instance makes the jobs of one run of the template: the k-th job of order gets the
// id first+k, each its dependencies' ids, the caller and context, and the schedule
// and tick that made it. It returns the jobs in that order (dependencies first).
func (t *FlowTemplate) Instance(order []int, first, callerID, ctxID uint32, scheduleID string, tickMs int64) []*Job {
	ids := make([]uint32, len(t.Jobs))
	for k, i := range order {
		ids[i] = first + uint32(k)
	}
	byName := make(map[string]int, len(t.Jobs))
	for i, j := range t.Jobs {
		byName[j.Name] = i
	}
	out := make([]*Job, len(order))
	for k, i := range order {
		tj := t.Jobs[i]
		j := tj.Job
		j.ID, j.CallerID, j.ContextID, j.ScheduleID, j.ScheduleTickMs = ids[i], callerID, ctxID, scheduleID, tickMs
		j.Dependends = make([]uint32, 0, len(tj.Depends))
		for _, d := range tj.Depends {
			j.Dependends = append(j.Dependends, ids[byName[d]])
		}
		out[k] = &j
	}
	return out
}
