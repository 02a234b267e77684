package model

import "reflect"

// HashFieldNames are the names of the hash fields of a model struct (obj: a pointer
// to one), every one, set or not: what an HMGET of the whole object names.
func HashFieldNames(obj any) []string {
	fs := fieldsOf(reflect.Indirect(reflect.ValueOf(obj)).Type())
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}
