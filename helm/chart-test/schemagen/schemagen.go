// Package schemagen builds the chart's values.schema.json from a hand-written
// source (schema/values.schema.src.yaml) in which Kubernetes objects are named
// by reference ("#/definitions/core.v1.Container"). The definitions of those
// objects are derived from the Go API types themselves, so every field of every
// nested object is typed and unknown fields are rejected (additionalProperties:
// false), exactly as a strict decoder of the real type would.
package schemagen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// API types the source may refer to by "<group>.<version>.<Type>". Types they
// contain are added as needed under the same naming.
var roots = []any{
	corev1.Affinity{},
	corev1.Container{},
	corev1.EnvFromSource{},
	corev1.EnvVar{},
	corev1.LocalObjectReference{},
	corev1.PodSecurityContext{},
	corev1.ResourceRequirements{},
	corev1.SecurityContext{},
	corev1.Toleration{},
	corev1.TopologySpreadConstraint{},
	corev1.Volume{},
	corev1.VolumeMount{},
	appsv1.DeploymentStrategy{},
	autoscalingv2.HorizontalPodAutoscalerBehavior{},
	networkingv1.NetworkPolicyPeer{},
	networkingv1.NetworkPolicyIngressRule{},
	networkingv1.NetworkPolicyEgressRule{},
	monitoringv1.RelabelConfig{},
}

const (
	defPrefix      = "#/definitions/"
	mergeKey       = "x-mergeProperties"
	quantityDefRef = defPrefix + "quantity" // hand-written in the source
)

var (
	quantityType    = reflect.TypeOf(resource.Quantity{})
	intOrStringType = reflect.TypeOf(intstr.IntOrString{})
	timeType        = reflect.TypeOf(metav1.Time{})
	microTimeType   = reflect.TypeOf(metav1.MicroTime{})
	durationType    = reflect.TypeOf(metav1.Duration{})
)

// Generate turns the YAML source into the JSON schema (indented, keys sorted,
// ending in a newline).
func Generate(src []byte) ([]byte, error) {
	js, err := yaml.YAMLToJSONStrict(src)
	if err != nil {
		return nil, fmt.Errorf("schema source: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("schema source: %w", err)
	}
	defs, _ := doc["definitions"].(map[string]any)
	if defs == nil {
		defs = map[string]any{}
		doc["definitions"] = defs
	}
	if err := expandMerges(doc, defs); err != nil {
		return nil, err
	}

	g := &gen{defs: defs, byName: map[string]reflect.Type{}}
	for _, r := range roots {
		t := reflect.TypeOf(r)
		g.byName[defName(t)] = t
	}
	// Add every API definition referred to, transitively.
	for _, ref := range collectRefs(doc) {
		name := strings.TrimPrefix(ref, defPrefix)
		if _, ok := defs[name]; ok {
			continue
		}
		t, ok := g.byName[name]
		if !ok {
			return nil, fmt.Errorf("schema source refers to %q: neither a definition nor a known API type (add it to schemagen.roots)", ref)
		}
		g.structRef(t)
	}
	prune(doc, defs)

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// expandMerges replaces every x-mergeProperties list by the properties of the
// named definitions (the object's own properties win).
func expandMerges(node any, defs map[string]any) error {
	switch n := node.(type) {
	case map[string]any:
		if raw, ok := n[mergeKey]; ok {
			names, ok := raw.([]any)
			if !ok {
				return fmt.Errorf("%s must be a list of definition names", mergeKey)
			}
			props, _ := n["properties"].(map[string]any)
			if props == nil {
				props = map[string]any{}
			}
			merged := map[string]any{}
			for _, nm := range names {
				name, _ := nm.(string)
				def, ok := defs[name].(map[string]any)
				if !ok {
					return fmt.Errorf("%s: no definition %q", mergeKey, name)
				}
				if err := expandMerges(def, defs); err != nil {
					return err
				}
				dp, _ := def["properties"].(map[string]any)
				for k, v := range dp {
					merged[k] = deepCopy(v)
				}
			}
			for k, v := range props {
				merged[k] = v
			}
			n["properties"] = merged
			delete(n, mergeKey)
		}
		for _, v := range n {
			if err := expandMerges(v, defs); err != nil {
				return err
			}
		}
	case []any:
		for _, v := range n {
			if err := expandMerges(v, defs); err != nil {
				return err
			}
		}
	}
	return nil
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// collectRefs lists the distinct "$ref" values under node, sorted.
func collectRefs(node any) []string {
	seen := map[string]bool{}
	var walk func(any)
	walk = func(n any) {
		switch x := n.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				seen[r] = true
			}
			for _, v := range x {
				walk(v)
			}
		case []any:
			for _, v := range x {
				walk(v)
			}
		}
	}
	walk(node)
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// prune drops definitions that nothing reachable from the root properties uses.
func prune(doc map[string]any, defs map[string]any) {
	used := map[string]bool{}
	var visit func(any)
	visit = func(n any) {
		for _, r := range collectRefs(n) {
			name := strings.TrimPrefix(r, defPrefix)
			if used[name] {
				continue
			}
			used[name] = true
			if d, ok := defs[name]; ok {
				visit(d)
			}
		}
	}
	rest := map[string]any{}
	for k, v := range doc {
		if k != "definitions" {
			rest[k] = v
		}
	}
	visit(rest)
	for name := range defs {
		if !used[name] {
			delete(defs, name)
		}
	}
}

type gen struct {
	defs   map[string]any
	byName map[string]reflect.Type
}

// defName is "<group>.<version>.<Type>", from the last two elements of the
// package path: k8s.io/api/core/v1.Container → core.v1.Container.
func defName(t reflect.Type) string {
	parts := strings.Split(t.PkgPath(), "/")
	if len(parts) < 2 {
		return t.Name()
	}
	return parts[len(parts)-2] + "." + parts[len(parts)-1] + "." + t.Name()
}

// structRef adds the definition of struct type t (once) and returns a $ref to it.
func (g *gen) structRef(t reflect.Type) map[string]any {
	name := defName(t)
	ref := map[string]any{"$ref": defPrefix + name}
	if _, ok := g.defs[name]; ok {
		return ref
	}
	g.defs[name] = map[string]any{} // placeholder: breaks recursion
	props := map[string]any{}
	g.fields(t, props)
	g.defs[name] = map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"properties":           props,
	}
	return ref
}

// fields adds the JSON fields of struct t (embedded ",inline" structs flattened).
func (g *gen) fields(t reflect.Type, props map[string]any) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
	}
}

func (g *gen) schema(t reflect.Type) map[string]any {
	switch t {
	case quantityType:
		return map[string]any{"$ref": quantityDefRef}
	case intOrStringType:
		return map[string]any{"type": []any{"integer", "string"}}
	case timeType, microTimeType, durationType:
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string"} // []byte is base64 in JSON
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		return g.structRef(t)
	case reflect.Interface:
		return map[string]any{}
	}
	panic(fmt.Sprintf("schemagen: no JSON schema for Go type %s", t))
}
