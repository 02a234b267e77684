package protoconv

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/testutil/protorand"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
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

// AppendJob encodes the message JobToPB makes: jobs with every field of the message
// set at random (a field JobToPB sets and AppendJob does not write fails here), with
// and without those it leaves to proto (maps, JSON, limits), and the empty job.
func TestAppendJobAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 1))
	viaProto := map[protoreflect.FieldNumber]bool{8: true, 9: true, 33: true, 34: true, 35: true}
	for round := range 200 {
		pb := &herov1.Job{}
		skip := viaProto
		if round%2 == 1 {
			skip = nil
		}
		protorand.Fill(t, r, pb.ProtoReflect(), skip)
		pb.Origin, pb.DepResults = "", ""
		if skip == nil {
			pb.Origin, pb.DepResults = `{"node":"n1","context_id":1,"caller_id":2,"job_id":3}`, `{"1":{"K":"v"}}`
		}
		j := JobFromPB(pb)
		for _, j := range []*model.Job{j, {}} {
			b, err := AppendJob([]byte{0xff}, j) // after what b held
			if err != nil {
				t.Fatal(err)
			}
			var got herov1.Job
			if err := proto.Unmarshal(b[1:], &got); err != nil {
				t.Fatal(err)
			}
			if want := JobToPB(j); !proto.Equal(&got, want) {
				t.Fatalf("round %d:\n got %v\nwant %v", round, &got, want)
			}
		}
	}
}
