package model

import "testing"

// "executor#handler" alone routes a handler job: script_type is optional, filled only
// when the executor is named after a script type.
func TestHandlerExecutorPrefixRoutes(t *testing.T) {
	j := Job{ID: 1, CallerID: 1, ContextID: 1, FunctionName: "spec#echo"}
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
	if j.ScriptType != "" || j.QueueSuffix() != "exec:spec" {
		t.Fatalf("script_type %q, queue suffix %q", j.ScriptType, j.QueueSuffix())
	}
	j = Job{ID: 1, CallerID: 1, ContextID: 1, FunctionName: "python#echo"}
	if err := j.Validate(); err != nil || j.ScriptType != ScriptPython || j.QueueSuffix() != "exec:python" {
		t.Fatalf("python#echo: %v %q %q", err, j.ScriptType, j.QueueSuffix())
	}
	j = Job{ID: 1, CallerID: 1, ContextID: 1, FunctionName: "echo"}
	if err := j.Validate(); err == nil {
		t.Fatal("a handler with neither executor prefix nor script_type was accepted")
	}
}
