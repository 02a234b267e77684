package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-graphviz"
)

// A flow's DAG, laid out on the server by Graphviz's dot (go-graphviz runs it as
// WebAssembly: no cgo, no binary beside ours) and drawn as SVG. Jobs with the same
// dependencies and the same dependents (a fan-out's members) are drawn as one group
// node with counts when there are more than collapseAt of them, so a flow of
// thousands of parallel jobs stays a graph of a few nodes.

const collapseAt = 8

// maxLayoutNodes bounds the nodes given to the layout: a graph still larger after the
// fan-outs are collapsed (a long chain, many small fan-outs) is drawn as bands of
// consecutive levels, each one node with counts.
const maxLayoutNodes = 300

type dagNode struct {
	ID           uint32   `json:"id"`
	Depends      []uint32 `json:"depends"`
	Dependents   []uint32 `json:"dependents"`
	NodeStatus   string   `json:"node_status"`
	JobStatus    string   `json:"job_status"`
	Attempt      uint32   `json:"attempt"`
	Error        string   `json:"error"`
	ScriptType   string   `json:"script_type"`
	FunctionName string   `json:"function_name"`
}

type dagResult struct {
	Flow  json.RawMessage `json:"flow"`
	Nodes []dagNode       `json:"nodes"`
}

// layoutEngine is one Graphviz instance.
type layoutEngine struct{ g *graphviz.Graphviz }

// nodeView is what the page keeps per job: its status, caller and group.
type nodeView struct {
	Status   string `json:"status"`
	CallerID uint32 `json:"caller_id,omitempty"`
	Group    string `json:"group,omitempty"`
	Label    string `json:"label"`
}

// statusOf is a node's state as the page shows it.
func statusOf(n *dagNode) string {
	if n.NodeStatus != "" {
		return n.NodeStatus
	}
	return "pending"
}

// groups finds the nodes drawn as one: the fan-outs, or the bands of levels when that
// leaves more than maxLayoutNodes. group name → members.
func groups(nodes []dagNode) map[string][]uint32 {
	out := fanOuts(nodes)
	visible := len(nodes)
	for _, ids := range out {
		visible -= len(ids) - 1
	}
	if visible <= maxLayoutNodes {
		return out
	}
	return bands(nodes)
}

// bands groups the nodes by their level (the longest path from a root), consecutive
// levels together so that there are at most maxLayoutNodes bands.
func bands(nodes []dagNode) map[string][]uint32 {
	level := map[uint32]int{}
	var depth func(id uint32, seen map[uint32]bool) int
	deps := map[uint32][]uint32{}
	for i := range nodes {
		deps[nodes[i].ID] = nodes[i].Depends
	}
	depth = func(id uint32, seen map[uint32]bool) int {
		if l, ok := level[id]; ok {
			return l
		}
		if seen[id] { // a cycle: flow.start refuses them; drawn flat
			return 0
		}
		seen[id] = true
		l := 0
		for _, d := range deps[id] {
			if _, known := deps[d]; known {
				l = max(l, depth(d, seen)+1)
			}
		}
		level[id] = l
		return l
	}
	top := 0
	for i := range nodes {
		top = max(top, depth(nodes[i].ID, map[uint32]bool{}))
	}
	per := top/maxLayoutNodes + 1 // levels per band
	out := map[string][]uint32{}
	for i := range nodes {
		b := "b" + strconv.Itoa(level[nodes[i].ID]/per)
		out[b] = append(out[b], nodes[i].ID)
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// fanOuts finds the collapsed fan-outs: group name → members.
func fanOuts(nodes []dagNode) map[string][]uint32 {
	bySig := map[string][]uint32{}
	for i := range nodes {
		n := &nodes[i]
		d, e := slices.Clone(n.Depends), slices.Clone(n.Dependents)
		slices.Sort(d)
		slices.Sort(e)
		sig := fmt.Sprint(d, e)
		bySig[sig] = append(bySig[sig], n.ID)
	}
	out := map[string][]uint32{}
	for _, ids := range bySig {
		if len(ids) > collapseAt {
			slices.Sort(ids)
			out["g"+strconv.FormatUint(uint64(ids[0]), 10)] = ids
		}
	}
	return out
}

func nodeLabel(n *dagNode) string {
	what := n.ScriptType
	if n.FunctionName != "" {
		what = n.FunctionName
	}
	return fmt.Sprintf("job %d · %s\n%s", n.ID, what, statusOf(n))
}

// dot writes the graph in the dot language; every name and label is made of ids,
// statuses and the script type or function name (quoted).
func dot(nodes []dagNode, grp map[string][]uint32) (string, map[uint32]*nodeView) {
	view := map[uint32]*nodeView{}
	groupOf := map[uint32]string{}
	for g, ids := range grp {
		for _, id := range ids {
			groupOf[id] = g
		}
	}
	name := func(id uint32) string {
		if g, ok := groupOf[id]; ok {
			return g
		}
		return "j" + strconv.FormatUint(uint64(id), 10)
	}
	var b strings.Builder
	b.WriteString("digraph flow {\nrankdir=TB; nodesep=0.25; ranksep=0.45; bgcolor=\"transparent\";\n")
	b.WriteString("node [shape=box, style=\"rounded,filled\", fontname=\"sans-serif\", fontsize=11, fillcolor=\"#eeeeee\", color=\"#555555\"];\nedge [color=\"#888888\", arrowsize=0.6];\n")
	names := make([]string, 0, len(grp))
	for g := range grp {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		fmt.Fprintf(&b, "%s [id=%q, class=\"group\", shape=box3d, label=%q];\n", g, "n-"+g, fmt.Sprintf("%d jobs\n…", len(grp[g])))
	}
	edges := map[string]bool{}
	for i := range nodes {
		n := &nodes[i]
		view[n.ID] = &nodeView{Status: statusOf(n), Group: groupOf[n.ID], Label: nodeLabel(n)}
		if _, grouped := groupOf[n.ID]; !grouped {
			fmt.Fprintf(&b, "%s [id=%q, class=%q, label=%q];\n", name(n.ID), "n-"+name(n.ID), "st-"+statusOf(n), nodeLabel(n))
		}
		for _, d := range n.Depends {
			e := name(d) + " -> " + name(n.ID)
			if name(d) != name(n.ID) && !edges[e] {
				edges[e] = true
				b.WriteString(e + ";\n")
			}
		}
	}
	b.WriteString("}\n")
	return b.String(), view
}

func (c *Console) render(ctx context.Context, src string) ([]byte, error) {
	c.gvMu.Lock()
	defer c.gvMu.Unlock()
	if c.gv == nil {
		g, err := graphviz.New(ctx)
		if err != nil {
			return nil, err
		}
		c.gv = &layoutEngine{g: g}
	}
	gr, err := graphviz.ParseBytes([]byte(src))
	if err != nil {
		return nil, err
	}
	defer func() { _ = gr.Close() }()
	var buf bytes.Buffer
	if err := c.gv.g.Render(ctx, gr, graphviz.SVG, &buf); err != nil {
		return nil, err
	}
	svg := buf.Bytes()
	if i := bytes.Index(svg, []byte("<svg")); i > 0 {
		svg = svg[i:] // without the XML declaration and doctype, to be inlined
	}
	return svg, nil
}

// dag answers a flow's DAG: the SVG, each job's state and group.
func (c *Console) dag(w http.ResponseWriter, r *http.Request) {
	ctxID, err := queryUint(r, "context_id", true)
	if err == nil {
		var id uint32
		if id, err = queryUint(r, "id", true); err == nil {
			c.dagOf(w, r, ctxID, id)
			return
		}
	}
	fail(w, http.StatusBadRequest, err.Error())
}

func (c *Console) dagOf(w http.ResponseWriter, r *http.Request, ctxID, id uint32) {
	out, err := c.b.Call(r.Context(), sessionOf(r).identity(), "flow.dag", map[string]any{"context_id": ctxID, "id": id})
	if err != nil {
		failAPI(w, err)
		return
	}
	var d dagResult
	if err := json.Unmarshal(out, &d); err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	var flow struct {
		CallerID uint32 `json:"caller_id"`
	}
	_ = json.Unmarshal(d.Flow, &flow)
	grp := groups(d.Nodes)
	src, view := dot(d.Nodes, grp)
	for _, v := range view {
		v.CallerID = flow.CallerID
	}
	svg, err := c.render(r.Context(), src)
	if err != nil {
		fail(w, http.StatusInternalServerError, "layout: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"flow": d.Flow, "svg": string(svg), "nodes": view, "groups": grp})
}
