package main

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hero-coordinator/hero/lib/testutil/protorand"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// sameRequests checks that DecodeWire reads b as proto.Unmarshal and requestOf do
// (the way the stream's requests were read before, and still are for the uncommon
// ones): an error both ways (the same one), or the same submissions. It returns
// whether the fast way took it.
func sameRequests(t testing.TB, b []byte) bool {
	t.Helper()
	var m herov1.SubmitJobStreamRequest
	werr := proto.Unmarshal(b, &m)
	var want streamRequest
	if werr == nil {
		requestOf(&m, &want)
	}
	var got streamRequest
	err := got.DecodeWire(string(b))
	if (err != nil) != (werr != nil) || err != nil && err.Error() != werr.Error() {
		t.Fatalf("DecodeWire: %v, proto: %v", err, werr)
	}
	if err != nil {
		return false
	}
	sameEmptyEnv(&got, &want)
	if !reflect.DeepEqual(got.first, want.first) {
		t.Fatalf("the request's own submission:\n got %+v\nwant %+v", got.first, want.first)
	}
	if len(got.batch) != len(want.batch) {
		t.Fatalf("%d items, want %d", len(got.batch), len(want.batch))
	}
	for i := range want.batch {
		if !reflect.DeepEqual(got.batch[i], want.batch[i]) {
			t.Fatalf("item %d:\n got %+v\nwant %+v", i, got.batch[i], want.batch[i])
		}
	}
	var fast streamRequest
	return fastRequest(string(b), &fast)
}

// sameEmptyEnv makes an empty env_vars nil in both: proto makes an empty map for an
// env_vars field with another wire type (a field it then keeps as unknown), the
// fast way none; a job stores both the same ("{}").
func sameEmptyEnv(got, want *streamRequest) {
	reqs := []*streamReq{&got.first, &want.first}
	for i := range got.batch {
		reqs = append(reqs, &got.batch[i])
	}
	for i := range want.batch {
		reqs = append(reqs, &want.batch[i])
	}
	for _, q := range reqs {
		if len(q.job.EnvVars) == 0 {
			q.job.EnvVars = nil
		}
	}
}

// jobUsualOnly are the Job's fields the fast way leaves to proto (maps, limits).
var jobUsualOnly = map[protoreflect.FieldNumber]bool{8: true, 9: true, 35: true}

// The requests decoded field by field (DecodeWire) are the submissions proto.Unmarshal
// and requestOf make: jobs with every field set (a field added to Job that the fast
// way reads wrong fails here), jobs the fast way leaves to the usual one, the
// submission's options, single submissions and batches, a batch with a submission of
// its own, items without a submission or holding a batch, unknown fields, lists
// packed or not, strings that are not UTF-8, a message field twice, and every cut of
// a message.
func TestDecodeRequestsAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	for round := range 50 {
		fastJob, fullJob := &herov1.Job{}, &herov1.Job{}
		protorand.Fill(t, r, fastJob.ProtoReflect(), jobUsualOnly)
		protorand.Fill(t, r, fullJob.ProtoReflect(), nil)
		sub := &herov1.SubmitJobRequest{}
		protorand.Fill(t, r, sub.ProtoReflect(), map[protoreflect.FieldNumber]bool{2: true})
		sub.Job = fastJob
		batch := &herov1.SubmitJobStreamRequest{Batch: []*herov1.SubmitJobStreamRequest{
			{Seq: 1, Submit: sub, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			{Seq: 2, Submit: &herov1.SubmitJobRequest{ContextId: 1, Job: fastJob}},
			{Seq: 3, Submit: &herov1.SubmitJobRequest{ContextId: 1}},
			{Seq: 4},
		}}
		b, err := proto.Marshal(batch)
		if err != nil {
			t.Fatal(err)
		}
		if !sameRequests(t, b) {
			t.Fatalf("round %d: the fast way did not take a batch of new jobs", round)
		}
		for cut := range len(b) { // every cut: an error both ways, or the same submissions
			sameRequests(t, b[:cut])
		}
		one, _ := proto.Marshal(&herov1.SubmitJobStreamRequest{Seq: 9, Submit: sub})
		if !sameRequests(t, one) {
			t.Fatal("the fast way did not take a single submission")
		}
		batch.Seq, batch.Submit = 5, sub // a batch with a submission of its own
		both, _ := proto.Marshal(batch)
		if !sameRequests(t, both) {
			t.Fatal("the fast way did not take a batch with a submission of its own")
		}
		full, _ := proto.Marshal(&herov1.SubmitJobStreamRequest{Batch: []*herov1.SubmitJobStreamRequest{{Seq: 1, Submit: &herov1.SubmitJobRequest{Job: fullJob}}}})
		if sameRequests(t, full) {
			t.Fatal("the fast way took a job with maps and limits")
		}
		nested, _ := proto.Marshal(&herov1.SubmitJobStreamRequest{Batch: []*herov1.SubmitJobStreamRequest{{Seq: 1, Batch: []*herov1.SubmitJobStreamRequest{{Seq: 2}}}}})
		sameRequests(t, nested)
	}
	// dependends unpacked, fields this version does not know, a known field with
	// another wire type, strings that are not UTF-8, a message field twice
	job := protorand.UnusualJob()
	job = protowire.AppendTag(job, 12, protowire.BytesType) // created_at as bytes: unknown to proto
	job = protowire.AppendString(job, "x")
	request := func(job []byte) []byte {
		sub := protowire.AppendTag(nil, 2, protowire.BytesType)
		sub = protowire.AppendBytes(sub, job)
		item := protowire.AppendTag(nil, 1, protowire.VarintType)
		item = protowire.AppendVarint(item, 1)
		item = protowire.AppendTag(item, 2, protowire.BytesType)
		return protowire.AppendBytes(item, sub)
	}
	if !sameRequests(t, request(job)) {
		t.Fatal("the fast way did not take unpacked lists and unknown fields")
	}
	for _, num := range []protowire.Number{4, 14, 33, 10} { // script, status, origin, prerequisites
		bad := protowire.AppendTag(append([]byte(nil), job...), num, protowire.BytesType)
		bad = protowire.AppendString(bad, "\xff")
		sameRequests(t, request(bad))
	}
	twice := append(request(job), request(job)[2:]...) // the submit field twice: merged by proto
	sameRequests(t, twice)
}

// Bad bytes get proto's error, as they did before the stream decoded its requests
// itself: a cut message, a string that is not UTF-8.
func TestDecodeRequestsErrors(t *testing.T) {
	good, err := proto.Marshal(&herov1.SubmitJobStreamRequest{Seq: 1, Submit: &herov1.SubmitJobRequest{ContextId: 1, Job: &herov1.Job{Script: "true", ScriptType: "sh"}}})
	if err != nil {
		t.Fatal(err)
	}
	notUTF8 := protowire.AppendTag(append([]byte(nil), good...), 3, protowire.BytesType)
	notUTF8 = protowire.AppendString(notUTF8, "\xff")
	for name, b := range map[string][]byte{"cut": good[:len(good)-2], "not UTF-8": notUTF8, "bad tag": {0xff}} {
		var r streamRequest
		err := r.DecodeWire(string(b))
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if name == "not UTF-8" && !strings.Contains(err.Error(), "UTF-8") {
			t.Fatalf("%s: %v", name, err)
		}
		sameRequests(t, b)
	}
}

// FuzzDecodeRequests: whatever bytes a producer sends as a submission stream's
// request, the field-by-field decoder (DecodeWire) never panics and reads them as
// proto.Unmarshal and requestOf do — the same error both ways, or the same
// submissions (sameRequests). make fuzz runs it for a bounded count.
func FuzzDecodeRequests(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	job := &herov1.Job{}
	protorand.Fill(f, r, job.ProtoReflect(), jobUsualOnly)
	for _, m := range []*herov1.SubmitJobStreamRequest{
		{Seq: 9, Submit: &herov1.SubmitJobRequest{ContextId: 1, Job: job, UniqueKey: "k", UniqueTtlSeconds: 60}, Traceparent: "tp"},
		{Batch: []*herov1.SubmitJobStreamRequest{
			{Seq: 1, Submit: &herov1.SubmitJobRequest{ContextId: 1, Job: job, Delay: "1s"}},
			{Seq: 2, Submit: &herov1.SubmitJobRequest{ContextId: 1}},
			{Seq: 3},
		}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameRequests(t, b) })
}
