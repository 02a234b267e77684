package model

import (
	"errors"
	"slices"
	"testing"
)

// A flow template's order puts each job after the ones it depends on (stable by
// position); bad templates are refused naming the field; an instance gives the k-th
// job of the order the id first+k and its dependencies' ids.
func TestFlowTemplateOrderAndInstance(t *testing.T) {
	tmpl := &FlowTemplate{Jobs: []TemplateJob{
		{Name: "report", Depends: []string{"load", "extract"}, Job: Job{ScriptType: "sh", Script: "r"}},
		{Name: "extract", Job: Job{ScriptType: "sh", Script: "e"}},
		{Name: "load", Depends: []string{"extract"}, Job: Job{ScriptType: "sh", Script: "l"}},
	}}
	order, err := tmpl.Order()
	if err != nil || !slices.Equal(order, []int{1, 2, 0}) {
		t.Fatalf("order: %v, %v (want extract, load, report)", order, err)
	}
	jobs := tmpl.Instance(order, 10, 7, 3, "nightly", 1234)
	if jobs[0].ID != 10 || jobs[0].Script != "e" || len(jobs[0].Dependends) != 0 ||
		jobs[1].ID != 11 || !slices.Equal(jobs[1].Dependends, []uint32{10}) ||
		jobs[2].ID != 12 || !slices.Equal(jobs[2].Dependends, []uint32{11, 10}) ||
		jobs[2].CallerID != 7 || jobs[2].ContextID != 3 || jobs[2].ScheduleID != "nightly" || jobs[2].ScheduleTickMs != 1234 {
		t.Fatalf("instance: %+v %+v %+v", jobs[0], jobs[1], jobs[2])
	}
	if tmpl.Jobs[0].Job.ID != 0 || tmpl.Jobs[0].Job.Dependends != nil {
		t.Fatal("an instance changed its template")
	}
	for field, bad := range map[string][]TemplateJob{
		"flow.jobs":            nil,
		"flow.jobs[1].name":    {{Name: "a"}, {Name: "a"}},
		"flow.jobs[0].name":    {{Name: ""}},
		"flow.jobs[0].depends": {{Name: "a", Depends: []string{"b"}}},
	} {
		_, err := (&FlowTemplate{Jobs: bad}).Order()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("template %+v: %v (want an error naming %s)", bad, err, field)
		}
	}
	_, err = (&FlowTemplate{Jobs: []TemplateJob{{Name: "a", Depends: []string{"b"}}, {Name: "b", Depends: []string{"a"}}}}).Order()
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "flow.jobs" || ve.Msg != "dependency cycle among jobs a, b" {
		t.Errorf("a cycle: %v", err)
	}
}
