package protoconv

import (
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
)

// A job's origin and dependencies' results convert as their JSON, "" when the job has
// none (nil: not JSON's "null"); an empty map is "{}"; and they come back.
func TestJobOriginAndDepResults(t *testing.T) {
	for _, tc := range []struct {
		name         string
		j            *model.Job
		origin, deps string
	}{
		{"none", &model.Job{ID: 1}, "", ""},
		{"empty", &model.Job{ID: 1, DepResults: map[string]map[string]string{}}, "", "{}"},
		{"set", &model.Job{ID: 1, Origin: &model.Origin{}, DepResults: map[string]map[string]string{"2": {"out": "x"}}}, "{", `{"2":{"out":"x"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pb := JobToPB(tc.j)
			if pb.DepResults != tc.deps {
				t.Errorf("dep_results %q; want %q", pb.DepResults, tc.deps)
			}
			if (tc.origin == "") != (pb.Origin == "") || tc.origin != "" && pb.Origin[:1] != tc.origin {
				t.Errorf("origin %q; want %q…", pb.Origin, tc.origin)
			}
			back := JobFromPB(pb)
			if (back.Origin == nil) != (tc.j.Origin == nil) || len(back.DepResults) != len(tc.j.DepResults) {
				t.Errorf("back: origin %v, dep_results %v; want %v, %v", back.Origin, back.DepResults, tc.j.Origin, tc.j.DepResults)
			}
		})
	}
}
