package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
)

// A result message's fields, written directly (resultFields), are those that
// localMessageFields makes of the same message through its reflection, with the
// jobRef mark: with and without a flow and a text, of any caller and context.
func TestResultFieldsAsLocalMessage(t *testing.T) {
	now := time.UnixMicro(1796604279151234)
	for _, c := range []struct {
		ctx, caller, flow uint32
		text              string
	}{{9, 3, 0, ""}, {9, 3, 5, "results of 2 jobs of flow 5"}, {1, 4294967295, 4294967295, "x"}, {12, 1, 7, ""}} {
		m := model.Message{CallerID: c.caller, ContextID: c.ctx, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText,
			Status: model.MessageDispatched, CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: c.flow,
			Kind: model.KindJobResult, Message: c.text}
		var skip []string
		if c.text == "" {
			skip = []string{"message"}
		}
		want := append(localMessageFields(&m, skip...), fieldJobRef, "1")
		if got := resultFields(c.ctx, c.caller, c.flow, c.text, now); !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v: resultFields\n%q\nlocalMessageFields\n%q", c, got, want)
		}
	}
}

// A run's end in a result message, written directly for an end without an error text
// (plainResultRef), is resultRef's JSON; any other end is left to resultRef.
func TestPlainResultRefAsResultRef(t *testing.T) {
	for _, id := range []uint32{1, 4294967295} {
		for _, attempt := range []uint32{0, 1, 7} {
			for _, st := range []model.JobStatus{model.JobFinished, model.JobError, "", "some_status"} {
				for _, fatal := range []bool{false, true} {
					j := &model.Job{ID: id, Attempt: attempt}
					got, ok := plainResultRef(j, st, "", fatal)
					if want := resultRef(j, st, "", fatal); !ok || string(got) != string(want) {
						t.Fatalf("job %d attempt %d %q fatal %v: %s (%v), want %s", id, attempt, st, fatal, got, ok, want)
					}
				}
			}
		}
	}
	j := &model.Job{ID: 3, Attempt: 1}
	for _, c := range []struct {
		st  model.JobStatus
		err string
	}{{model.JobError, "handler error: \"x\"\n"}, {`fin"ished`, ""}, {"Finished", ""}} {
		if got, ok := plainResultRef(j, c.st, c.err, false); ok {
			t.Fatalf("%q %q written directly as %s: resultRef's to write", c.st, c.err, got)
		}
	}
}

// A run's result as the job's result field stores it: "{}" for none, else its JSON.
func TestResultField(t *testing.T) {
	for _, r := range []map[string]string{nil, {}, {"output": "a\"b", "K": "v"}} {
		want := model.EncodeField(r)
		if r == nil {
			want = model.EncodeField(map[string]string{})
		}
		if got := resultField(r); got != want {
			t.Fatalf("%v: %q, want %q", r, got, want)
		}
	}
}
