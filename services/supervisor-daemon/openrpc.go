package main

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
)

// openRPCDocument describes the API for rpc.discover (OpenRPC 1.2), generated from
// the method table and the params types, so it cannot drift from the code.
func openRPCDocument(methods map[string]method) []byte {
	names := make([]string, 0, len(methods))
	for n := range methods {
		names = append(names, n)
	}
	sort.Strings(names)
	var list []map[string]any
	for _, n := range names {
		m := methods[n]
		var params []map[string]any
		for _, f := range jsonFields(reflect.TypeOf(m.params)) {
			name := jsonName(f)
			if name == "" {
				continue
			}
			params = append(params, map[string]any{"name": name, "schema": schemaOf(f.Type, 0)})
		}
		list = append(list, map[string]any{
			"name": n, "summary": m.summary, "paramStructure": "by-name",
			"params": params, "result": map[string]any{"name": "result", "schema": map[string]any{"description": m.result}},
		})
	}
	list = append(list, map[string]any{"name": "rpc.discover", "summary": "This document.", "params": []any{},
		"result": map[string]any{"name": "OpenRPC document", "schema": map[string]any{"type": "object"}}})
	doc := map[string]any{
		"openrpc": "1.2.6",
		"info": map[string]any{"title": "Hero coordinator API", "version": "1",
			"description": "JSON-RPC 2.0 over HTTP POST /. Identify with the X-Hero-Actor header or Authorization: Bearer <operator secret>. Errors: -32700 parse, -32600 invalid request, -32601 method not found, -32602 invalid params (data.field), -32003 permission denied, -32004 not found, -32008 timeout, -32009 already exists, -32010 failed precondition."},
		"methods": list,
	}
	b, _ := json.Marshal(doc)
	return b
}

// jsonFields are the fields of struct t as encoding/json sees them: an embedded
// struct's fields in its place (nil when t is not a struct).
func jsonFields(t reflect.Type) []reflect.StructField {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var out []reflect.StructField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		out = append(out, f)
	}
	return out
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return f.Name
	}
	return name
}

func schemaOf(t reflect.Type, depth int) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Uint8:
		return map[string]any{"type": "integer", "minimum": 0, "maximum": 255}
	case reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), depth+1)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), depth+1)}
	case reflect.Struct:
		if depth > 3 {
			return map[string]any{"type": "object"}
		}
		props := map[string]any{}
		for _, f := range jsonFields(t) {
			if !f.IsExported() {
				continue
			}
			if n := jsonName(f); n != "" {
				props[n] = schemaOf(f.Type, depth+1)
			}
		}
		return map[string]any{"type": "object", "properties": props}
	}
	return map[string]any{}
}
