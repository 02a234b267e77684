package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Who may call a method (docs/api.md, Permissions).
const (
	needAny      = iota // any authenticated caller
	needReader          // reader, executor or admin of the context (or the operator)
	needExecutor        // executor or admin (or the operator)
	needAdmin           // admin (or the operator)
	needOperator        // the operator only
	needSelf            // the actor named in the params (actor 2 here), or the operator
)

// matrixCase is one method: its JSON-RPC name and params, its gRPC method and request
// (protojson; "" = the JSON-RPC params). {{N}} in the params is a number unique to the
// call. Params are chosen so that an allowed call does nothing harmful: most name an
// object that does not exist, or are refused by validation after the permission check.
type matrixCase struct {
	rpc, grpc      string
	need           int
	params, gparam string
}

var matrixCases = []matrixCase{
	{"actor.create", "/hero.v1.Coordinator/CreateActor", needOperator, `{"actor":{"id":{{N}}}}`, ""},
	{"actor.load", "/hero.v1.Coordinator/GetActor", needAny, `{"id":1}`, ""},
	{"actor.update", "/hero.v1.Coordinator/UpdateActor", needSelf, `{"id":2,"address":["addr-{{N}}"]}`, `{"id":2,"address":{"values":["addr-{{N}}"]}}`},
	{"secret.list", "/hero.v1.Coordinator/ListOperatorSecrets", needOperator, `{}`, ""},
	{"secret.create", "/hero.v1.Coordinator/CreateOperatorSecret", needOperator, `{}`, ""},
	{"secret.revoke", "/hero.v1.Coordinator/RevokeOperatorSecret", needOperator, `{"fingerprint":"op_0000000000000000"}`, ""},
	{"context.create", "/hero.v1.Coordinator/CreateContext", needOperator, `{"context":{"id":9,"admins":[1]}}`, ""},
	{"context.load", "/hero.v1.Coordinator/GetContext", needReader, `{"id":1}`, ""},
	{"context.update", "/hero.v1.Coordinator/UpdateContext", needAdmin, `{"id":1,"readers":[2]}`, `{"id":1,"readers":{"ids":[2]}}`},
	{"context.delete", "/hero.v1.Coordinator/DeleteContext", needAdmin, `{"id":1}`, ""}, // a flow runs: refused after the check
	{"runner.create", "/hero.v1.Coordinator/CreateRunner", needAdmin, `{"context_id":1,"runner":{"id":{{N}},"script_types":["sh"]}}`, ""},
	{"runner.load", "/hero.v1.Coordinator/GetRunner", needReader, `{"context_id":1,"id":1}`, ""},
	{"runner.list", "/hero.v1.Coordinator/ListRunners", needReader, `{"context_id":1}`, ""},
	{"runner.delete", "/hero.v1.Coordinator/DeleteRunner", needAdmin, `{"context_id":1,"id":99999}`, ""},
	{"job.create", "/hero.v1.Coordinator/CreateJob", needAdmin, `{"context_id":1,"job":{"id":{{N}},"script":"true","script_type":"sh"}}`, ""},
	{"job.create_batch", "/hero.v1.Coordinator/CreateJobs", needAdmin, `{"context_id":1,"jobs":[{"id":{{N}},"script":"true","script_type":"sh"}]}`, ""},
	{"job.check_batch", "/hero.v1.Coordinator/CheckJobs", needAdmin, `{"context_id":1,"jobs":[{"script":"true","script_type":"sh"}]}`, ""},
	{"job.load", "/hero.v1.Coordinator/GetJob", needReader, `{"context_id":1,"caller_id":1,"id":1}`, ""},
	{"job.list", "/hero.v1.Coordinator/ListJobs", needReader, `{"context_id":1}`, ""},
	{"job.run", "/hero.v1.Coordinator/RunJob", needExecutor, `{"context_id":1,"job":{"script":"true","script_type":"no-such-type"}}`, ""},
	{"job.submit", "/hero.v1.Coordinator/SubmitJob", needExecutor, `{"context_id":1,"job":{"script":"true","script_type":"no-such-type"}}`, ""},
	{"job.submit_batch", "/hero.v1.Coordinator/SubmitJobs", needExecutor, `{"context_id":1,"jobs":[{"job":{"script":"true","script_type":"no-such-type"}}]}`, ""},
	{"", "/hero.v1.Coordinator/SubmitJobStream", needExecutor, "", `{"seq":1,"submit":{"context_id":1,"job":{"script":"true","script_type":"no-such-type"}}}`},
	{"job.stop", "/hero.v1.Coordinator/StopJob", needExecutor, `{"context_id":1,"caller_id":1,"id":99999}`, ""},
	{"job.logs", "/hero.v1.Coordinator/GetJobLogs", needReader, `{"context_id":1,"caller_id":1,"id":1}`, ""},
	{"job.delete", "/hero.v1.Coordinator/DeleteJob", needAdmin, `{"context_id":1,"caller_id":1,"id":99999}`, ""},
	{"flow.create", "/hero.v1.Coordinator/CreateFlow", needAdmin, `{"context_id":1,"flow":{"id":{{N}},"caller_id":1,"jobs":[99999]}}`, ""},
	{"flow.begin", "/hero.v1.Coordinator/BeginFlow", needAdmin, `{"context_id":1,"jobs":0}`, ""},
	{"flow.counts", "/hero.v1.Coordinator/GetFlowCounts", needReader, `{"context_id":1,"id":60}`, ""},
	{"flow.abort", "/hero.v1.Coordinator/AbortFlow", needAdmin, `{"context_id":1,"id":99999}`, ""},
	{"flow.load", "/hero.v1.Coordinator/GetFlow", needReader, `{"context_id":1,"id":60}`, ""},
	{"flow.list", "/hero.v1.Coordinator/ListFlows", needReader, `{"context_id":1}`, ""},
	{"flow.start", "/hero.v1.Coordinator/StartFlow", needExecutor, `{"context_id":1,"id":99999}`, ""},
	{"flow.wait", "/hero.v1.Coordinator/WaitFlow", needReader, `{"context_id":1,"id":60,"timeout":5}`, ""},
	{"flow.dag", "/hero.v1.Coordinator/GetFlowDag", needReader, `{"context_id":1,"id":60}`, ""},
	{"flow.cancel", "/hero.v1.Coordinator/CancelFlow", needExecutor, `{"context_id":1,"id":99999}`, ""},
	{"flow.delete", "/hero.v1.Coordinator/DeleteFlow", needAdmin, `{"context_id":1,"id":99999}`, ""},
	{"flow.retry", "/hero.v1.Coordinator/RetryFlow", needExecutor, `{"context_id":1,"id":99999}`, ""},
	{"dlq.list", "/hero.v1.Coordinator/ListDLQ", needReader, `{"context_id":1}`, ""},
	{"dlq.show", "/hero.v1.Coordinator/ShowDLQ", needReader, `{"context_id":1,"caller_id":1,"id":99999}`, ""},
	{"dlq.requeue", "/hero.v1.Coordinator/RequeueDLQ", needExecutor, `{"context_id":1,"caller_id":1,"id":99999}`, ""},
	{"dlq.purge", "/hero.v1.Coordinator/PurgeDLQ", needAdmin, `{"context_id":1,"caller_id":1,"id":99999}`, ""},
	{"message.create", "/hero.v1.Coordinator/CreateMessage", needAdmin, `{"context_id":1,"message":{"id":{{N}}}}`, ""},
	{"message.load", "/hero.v1.Coordinator/GetMessage", needReader, `{"context_id":1,"caller_id":1,"id":99999}`, ""},
	{"events.read", "/hero.v1.Coordinator/ReadEvents", needReader, `{"context_id":1,"after":"$"}`, `{"context_id":1,"after_id":"$"}`},
	{"", "/hero.v1.Coordinator/Watch", needReader, "", `{"context_id":1,"after_id":"0"}`},
	// Flow pause: JSON-RPC only (docs/scheduling.md).
	{"flow.pause", "", needExecutor, `{"context_id":1,"id":99999}`, ""},
	{"flow.resume", "", needExecutor, `{"context_id":1,"id":99999}`, ""},
	{"schedule.create", "/hero.v1.Coordinator/CreateSchedule", needAdmin, `{"context_id":1,"id":"m{{N}}","spec":{"every":"0s"},"job":{"script":"true","script_type":"sh"}}`, ""},
	{"schedule.load", "/hero.v1.Coordinator/GetSchedule", needReader, `{"context_id":1,"id":"none"}`, ""},
	{"schedule.list", "/hero.v1.Coordinator/ListSchedules", needReader, `{"context_id":1}`, ""},
	{"schedule.update", "/hero.v1.Coordinator/UpdateSchedule", needAdmin, `{"context_id":1,"id":"none"}`, ""},
	{"schedule.pause", "/hero.v1.Coordinator/PauseSchedule", needExecutor, `{"context_id":1,"id":"none"}`, ""},
	{"schedule.resume", "/hero.v1.Coordinator/ResumeSchedule", needExecutor, `{"context_id":1,"id":"none"}`, ""},
	{"schedule.delete", "/hero.v1.Coordinator/DeleteSchedule", needAdmin, `{"context_id":1,"id":"none"}`, ""},
	{"schedule.trigger", "/hero.v1.Coordinator/TriggerSchedule", needExecutor, `{"context_id":1,"id":"none"}`, ""},
	{"schedule.backfill", "/hero.v1.Coordinator/BackfillSchedule", needAdmin, `{"context_id":1,"id":"none","from":"x","to":"y"}`, ""},
	{"queue.list", "/hero.v1.Coordinator/ListQueues", needReader, `{"context_id":1}`, ""},
	{"queue.pause", "/hero.v1.Coordinator/PauseQueue", needExecutor, `{"context_id":1,"script_type":"no-such-type"}`, ""},
	{"queue.resume", "/hero.v1.Coordinator/ResumeQueue", needExecutor, `{"context_id":1,"executor":"no-such-executor"}`, ""},
	// Limits: JSON-RPC only (docs/scheduling.md); a scope that is none is refused
	// after the permission check, so the matrix sets no limit.
	{"limit.set", "", needAdmin, `{"context_id":1,"scope":"none","max_running":1}`, ""},
	{"limit.list", "", needReader, `{"context_id":1}`, ""},
	{"limit.delete", "", needAdmin, `{"context_id":1,"scope":"none"}`, ""},
	{"console.link", "", needAny, `{}`, ""},
	{"dispatcher.list_jobs", "/hero.v1.Dispatcher/ListJobs", needOperator, `{}`, ""},
	{"dispatcher.job_status", "/hero.v1.Dispatcher/JobStatus", needOperator, `{"id":"no-such-job"}`, ""},
	{"dispatcher.job_logs", "/hero.v1.Dispatcher/JobLogs", needOperator, `{"id":"no-such-job"}`, ""},
	{"dispatcher.stop_job", "/hero.v1.Dispatcher/StopJob", needOperator, `{"id":"no-such-job"}`, ""},
	{"dispatcher.run_job", "/hero.v1.Dispatcher/RunJob", needOperator, `{}`, ""},
}

// matrixRole is one caller of the matrix.
type matrixRole struct {
	name   string
	client *harness.Client
	rank   int  // 0 outsider, 1 reader, 2 executor, 3 admin, 4 operator
	actor2 bool // the actor that needSelf names
}

func (r matrixRole) allowed(need int) bool {
	switch need {
	case needAny:
		return true
	case needOperator:
		return r.rank == 4
	case needSelf:
		return r.rank == 4 || r.actor2
	}
	return r.rank >= need // needReader..needAdmin are ranks 1..3
}

// Acceptance (Trust I 2): every method of the API × every role, on JSON-RPC and on
// gRPC, all signed: allowed where docs/api.md allows it, -32003 / PermissionDenied
// everywhere else, and never an authentication failure.
func TestPermissionMatrixEveryMethod(t *testing.T) {
	s, admin := newStack(t, harness.StackOptions{})
	for _, id := range []uint32{2, 3, 4} {
		s.CreateActor(t, id)
	}
	admin.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{2}, "executors": []int{3}}, nil)
	createFlow(t, admin, 60, nil, jobSpec{id: 1, typ: "sh", script: "echo one"})
	createFlow(t, admin, 61, nil, jobSpec{id: 2, typ: "sh", script: "sleep 300"})
	admin.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 60}, nil)
	admin.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 61}, nil)
	if f := admin.WaitFlow(t, ctx1, 60, time.Minute); f.Status != "finished" {
		t.Fatalf("flow 60: %+v", f)
	}
	defer func() { _ = admin.Call("flow.cancel", map[string]any{"context_id": ctx1, "id": 61}, nil) }()
	roles := []matrixRole{
		{"outsider", s.Client(4), 0, false},
		{"reader", s.Client(2), 1, true},
		{"executor", s.Client(3), 2, false},
		{"admin", admin, 3, false},
		{"operator", s.Operator(), 4, false},
	}
	checkMatrixHasEveryMethod(t, admin)

	n := 1000
	unique := func(p string) string { n++; return strings.ReplaceAll(p, "{{N}}", fmt.Sprint(n)) }
	conns := map[string]*grpc.ClientConn{}
	for _, r := range roles {
		cc, err := r.client.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cc.Close() }()
		conns[r.name] = cc
	}
	var failures []string
	for _, c := range matrixCases {
		for _, r := range roles {
			if c.rpc != "" {
				failures = append(failures, jsonrpcMatrixFailure(r, c, unique(c.params))...)
			}
			if c.grpc == "" {
				continue
			}
			gp := c.gparam
			if gp == "" {
				gp = c.params
			}
			failures = append(failures, grpcMatrixFailure(conns[r.name], r, c, unique(gp))...)
		}
	}
	sort.Strings(failures)
	for _, f := range failures {
		t.Error(f)
	}
}

// checkMatrixHasEveryMethod: every method the server has (JSON-RPC, as
// rpc.discover lists them, and gRPC) is in the table.
func checkMatrixHasEveryMethod(t *testing.T, admin *harness.Client) {
	t.Helper()
	var disc struct {
		Methods []struct {
			Name string `json:"name"`
		} `json:"methods"`
	}
	admin.MustCall(t, "rpc.discover", nil, &disc)
	have := map[string]bool{}
	for _, c := range matrixCases {
		have[c.rpc], have[c.grpc] = true, true
	}
	for _, m := range disc.Methods {
		if m.Name != "rpc.discover" && !have[m.Name] {
			t.Errorf("JSON-RPC method %s is not in the permission matrix", m.Name)
		}
	}
	for _, svc := range []protoreflect.ServiceDescriptor{herov1.File_hero_v1_coordinator_proto.Services().Get(0), herov1.File_hero_v1_dispatcher_proto.Services().Get(0)} {
		for i := 0; i < svc.Methods().Len(); i++ {
			full := fmt.Sprintf("/%s/%s", svc.FullName(), svc.Methods().Get(i).Name())
			if !have[full] {
				t.Errorf("gRPC method %s is not in the permission matrix", full)
			}
		}
	}
}

// jsonrpcMatrixFailure calls the case's JSON-RPC method as the role and says what
// is wrong with the answer (nothing: no element): an authentication failure, a
// transport error, a refusal of an allowed call, or an allowed forbidden call.
func jsonrpcMatrixFailure(r matrixRole, c matrixCase, params string) []string {
	want := r.allowed(c.need)
	err := r.client.Call(c.rpc, json.RawMessage(params), nil)
	re, _ := err.(*harness.RPCError)
	switch {
	case re != nil && re.Code == -32001:
		return []string{fmt.Sprintf("jsonrpc %s as %s: authentication failed: %v", c.rpc, r.name, err)}
	case err != nil && re == nil:
		return []string{fmt.Sprintf("jsonrpc %s as %s: %v", c.rpc, r.name, err)}
	case want && re != nil && re.Code == -32003:
		return []string{fmt.Sprintf("jsonrpc %s as %s: refused: %v", c.rpc, r.name, err)}
	case !want && (re == nil || re.Code != -32003):
		return []string{fmt.Sprintf("jsonrpc %s as %s: want -32003, got %v", c.rpc, r.name, err)}
	}
	return nil
}

// grpcMatrixFailure is jsonrpcMatrixFailure for the case's gRPC method, over the
// role's connection cc.
func grpcMatrixFailure(cc *grpc.ClientConn, r matrixRole, c matrixCase, params string) []string {
	want := r.allowed(c.need)
	code, err := grpcMatrixCall(cc, c.grpc, params)
	switch {
	case err != nil:
		return []string{fmt.Sprintf("grpc %s as %s: %v", c.grpc, r.name, err)}
	case code == codes.Unauthenticated:
		return []string{fmt.Sprintf("grpc %s as %s: authentication failed", c.grpc, r.name)}
	case want && code == codes.PermissionDenied:
		return []string{fmt.Sprintf("grpc %s as %s: refused", c.grpc, r.name)}
	case !want && code != codes.PermissionDenied:
		return []string{fmt.Sprintf("grpc %s as %s: want PermissionDenied, got %v", c.grpc, r.name, code)}
	}
	return nil
}

// grpcMatrixCall calls a method with a request decoded from protojson and returns the
// call's status code (err: the test could not make the call).
func grpcMatrixCall(cc *grpc.ClientConn, full, reqJSON string) (codes.Code, error) {
	svcName, method, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svcName))
	if err != nil {
		return 0, err
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return 0, fmt.Errorf("no method %s", full)
	}
	newMsg := func(desc protoreflect.MessageDescriptor) (proto.Message, error) {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(desc.FullName())
		if err != nil {
			return nil, err
		}
		return mt.New().Interface(), nil
	}
	in, err := newMsg(md.Input())
	if err != nil {
		return 0, err
	}
	if err := protojson.Unmarshal([]byte(reqJSON), in); err != nil {
		return 0, fmt.Errorf("request %s: %v", reqJSON, err)
	}
	out, err := newMsg(md.Output())
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if md.IsStreamingServer() {
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: md.IsStreamingClient()}, full)
		if err != nil {
			return status.Code(err), nil
		}
		if err := st.SendMsg(in); err != nil {
			return status.Code(err), nil
		}
		if err := st.CloseSend(); err != nil {
			return status.Code(err), nil
		}
		if err := st.RecvMsg(out); err != nil {
			return status.Code(err), nil
		}
		if item, ok := out.(*herov1.SubmitJobStreamResponse); ok && item.Error != nil { // an item's own status
			return codes.Code(item.Error.Code), nil
		}
		return codes.OK, nil
	}
	return status.Code(cc.Invoke(ctx, full, in, out)), nil
}
