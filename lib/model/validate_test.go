package model

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

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

// isHandlerName takes what the name's pattern, [A-Za-z_][A-Za-z0-9_.:-]*, matches
// and nothing else: awkward names, then random strings over the pattern's characters
// and some others.
func TestIsHandlerNameIsItsPattern(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.:-]*$`)
	cases := []string{"", "a", "_", "Z9", "9a", "-a", ".a", ":a", "a.b:c-d_e", "a b", "a#b", "a\n", "é", "aé", "a\x00", "a/b", "A-"}
	const chars = "aZ_09.:-# /\né\x00"
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(6))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := isHandlerName(s), re.MatchString(s); got != want {
			t.Errorf("isHandlerName(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
