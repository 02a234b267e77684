package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// show prints a result: with -o json the object as the JSON-RPC API gives it (the
// seeds' field names, numbers as numbers), else a table or summary.
func (c *cli) show(v any, table func(w *tabwriter.Writer)) error {
	if c.g.output == "json" || table == nil {
		return c.printJSON(v)
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}

// printJSON prints v indented: encoding/json for the API's objects (lib/model, the
// Go client's results), protojson for a gRPC message (the Dispatcher's).
func (c *cli) printJSON(v any) error {
	var b []byte
	var err error
	if m, ok := v.(proto.Message); ok {
		b, err = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	// protojson varies its whitespace on purpose; re-indent for stable output.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, out.String())
	return err
}

// done prints what a call without an object did: a line, or with -o json the API's
// answer (e.g. {"deleted": true}).
func (c *cli) done(line string, answer any) error {
	if c.g.output == "json" {
		return c.printJSON(answer)
	}
	_, err := fmt.Fprintln(c.out, line)
	return err
}

func ids(v []uint32) string {
	if len(v) == 0 {
		return "-"
	}
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func ts(sec int64) string {
	if sec == 0 {
		return "-"
	}
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}

func kvLines(w *tabwriter.Writer, title string, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	writeKV(w, title, keys, m)
}

// flowResultLines prints a flow's result map ("<job id>.<KEY>"), in the order of its
// jobs (job 10's keys after job 8's) and without the empty output of a job that
// printed nothing.
func flowResultLines(w *tabwriter.Writer, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if _, key, _ := strings.Cut(k, "."); key == "output" && strings.TrimSpace(v) == "" {
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareResultKeys)
	writeKV(w, "result", keys, m)
}

// compareResultKeys orders "<job id>.<KEY>" by job id as a number, then by key.
func compareResultKeys(a, b string) int {
	ja, ka, _ := strings.Cut(a, ".")
	jb, kb, _ := strings.Cut(b, ".")
	na, errA := strconv.ParseUint(ja, 10, 64)
	nb, errB := strconv.ParseUint(jb, 10, 64)
	if errA == nil && errB == nil && na != nb {
		return cmp.Compare(na, nb)
	}
	return cmp.Or(strings.Compare(ja, jb), strings.Compare(ka, kb))
}

// writeKV prints the keys of m in the given order under a title.
func writeKV(w *tabwriter.Writer, title string, keys []string, m map[string]string) {
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\t\n", title)
	for _, k := range keys {
		v := strings.TrimRight(m[k], "\n")
		if strings.Contains(v, "\n") {
			v = strings.ReplaceAll(v, "\n", "\n\t")
		}
		fmt.Fprintf(w, "  %s\t%s\n", k, v)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
