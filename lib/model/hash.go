package model

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// The hash encoding (docs/data-model.md): strings as they are; integers in decimal;
// booleans as "true"/"false"; enums as their lowercase names; lists, maps and nested
// objects as JSON. Timestamps are integers (Unix seconds; fields ending in _ms are Unix
// milliseconds). Decoding is tolerant of what other implementations write: booleans
// "1"/"0", integers written as JSON numbers ("12.0"), enum spellings such as
// "WaitingForPrerequisites", empty strings for empty lists, and unknown fields (ignored).

type fieldInfo struct {
	name      string
	index     int
	omitEmpty bool
}

var fieldCache sync.Map // reflect.Type → []fieldInfo; a cache of immutable type facts

func fieldsOf(t reflect.Type) []fieldInfo {
	if v, ok := fieldCache.Load(t); ok {
		return v.([]fieldInfo)
	}
	var out []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("hash")
		if tag == "" || tag == "-" {
			continue
		}
		parts := strings.Split(tag, ",")
		fi := fieldInfo{name: parts[0], index: i}
		for _, p := range parts[1:] {
			if p == "omitempty" {
				fi.omitEmpty = true
			}
		}
		out = append(out, fi)
	}
	fieldCache.Store(t, out)
	return out
}

// HashFields returns the object's hash fields in the order the struct declares them, as
// alternating field names and values, ready for HSET.
func HashFields(obj any) []any {
	if j, ok := obj.(*Job); ok { // the hot one: every submission (jobhash.go)
		return j.hashFields()
	}
	return hashFieldsOf(obj)
}

// hashFieldsOf is HashFields by reflection, for any model struct.
func hashFieldsOf(obj any) []any {
	v := reflect.Indirect(reflect.ValueOf(obj))
	fs := fieldsOf(v.Type())
	out := make([]any, 0, 2*len(fs))
	for _, f := range fs {
		fv := v.Field(f.index)
		if f.omitEmpty && fv.IsZero() {
			continue
		}
		out = append(out, f.name, encodeValue(fv))
	}
	return out
}

// HashMap returns the object's hash fields as a map.
func HashMap(obj any) map[string]string {
	kv := HashFields(obj)
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(string)
	}
	return m
}

// EncodeField encodes one value the way HashFields does.
func EncodeField(v any) string { return encodeValue(reflect.ValueOf(v)) }

func encodeValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Slice:
		if v.IsNil() {
			return "[]"
		}
	case reflect.Map:
		if v.IsNil() {
			return "{}"
		}
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		// Only types of this package reach here, and all of them marshal.
		return ""
	}
	return string(b)
}

// DecodeError names the hash field that could not be read.
type DecodeError struct {
	Key   string
	Field string
	Value string
	Err   error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s: field %s: cannot read %q: %v", e.Key, e.Field, e.Value, e.Err)
}

// fieldIndex caches, per struct type, its hash fields by name (reflect.Type →
// map[string]fieldInfo).
var fieldIndex sync.Map

func fieldsByName(t reflect.Type) map[string]fieldInfo {
	if v, ok := fieldIndex.Load(t); ok {
		return v.(map[string]fieldInfo)
	}
	m := map[string]fieldInfo{}
	for _, f := range fieldsOf(t) {
		m[f.name] = f
	}
	fieldIndex.Store(t, m)
	return m
}

// FromFields fills obj (a pointer to a model struct) from some fields of a Redis hash,
// as HMGET answers them: names[i]'s value is vals[i], a string, or nil when the hash
// lacks the field (left as it is). It decodes as FromHash does, reading only the
// fields named (FromHash looks up each of the struct's). key only labels errors.
func FromFields(key string, names []string, vals []any, obj any) error {
	v := reflect.ValueOf(obj).Elem()
	byName := fieldsByName(v.Type())
	for i, name := range names {
		s, ok := vals[i].(string)
		f, known := byName[name]
		if !ok || !known {
			continue
		}
		if err := decodeField(key, v, f, s); err != nil {
			return err
		}
	}
	decoded(obj)
	return nil
}

// FromPairs fills obj (a pointer to a model struct) from lists of alternating field
// names and values (strings; other values as fmt.Sprint writes them), as HSET takes
// them: the object their hash decodes to, without the hash (a creation's answer is the
// object it has just stored). A name given twice takes its last value, as in the hash.
func FromPairs(key string, obj any, lists ...[]any) error {
	v := reflect.ValueOf(obj).Elem()
	byName := fieldsByName(v.Type())
	for _, kv := range lists {
		for i := 0; i+1 < len(kv); i += 2 {
			name, _ := kv[i].(string)
			f, known := byName[name]
			if !known {
				continue
			}
			s, ok := kv[i+1].(string)
			if !ok {
				s = fmt.Sprint(kv[i+1])
			}
			if err := decodeField(key, v, f, s); err != nil {
				return err
			}
		}
	}
	decoded(obj)
	return nil
}

// TraceOfClaim is the trace id (W3C, 32 hex digits) of a run whose claim stored none
// (lib/store ClaimStartsFresh): the first 32 hex digits of the SHA-1 of its claim id;
// "" for no claim.
func TraceOfClaim(claim string) string {
	if claim == "" {
		return ""
	}
	sum := sha1.Sum([]byte("trace " + claim))
	return hex.EncodeToString(sum[:16])
}

// FromHash fills obj (a pointer to a model struct) from the fields of a Redis hash.
// key only labels errors.
func FromHash(key string, h map[string]string, obj any) error {
	v := reflect.ValueOf(obj).Elem()
	for _, f := range fieldsOf(v.Type()) {
		s, ok := h[f.name]
		if !ok {
			continue
		}
		if err := decodeField(key, v, f, s); err != nil {
			return err
		}
	}
	if j, ok := obj.(*Job); ok && j.TraceID == "" {
		j.TraceID = TraceOfClaim(h["claim"]) // a run whose claim stored no trace id: its claim's
	}
	decoded(obj)
	return nil
}

// FromHashPairs is FromHash of a hash given as its field/value items (HGETALL's reply
// as a list, a DUMP read by lib/store's HashFromDump), without a map made of them
// first: each item's field is looked up once (FromHash looks up every field of the
// struct in the map). A claim's started jobs are read this way (~26 fields each).
func FromHashPairs(key string, pairs []string, obj any) error {
	v := reflect.ValueOf(obj).Elem()
	byName := fieldsByName(v.Type())
	claim := ""
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] == "claim" {
			claim = pairs[i+1]
		}
		f, known := byName[pairs[i]]
		if !known {
			continue
		}
		if err := decodeField(key, v, f, pairs[i+1]); err != nil {
			return err
		}
	}
	if j, ok := obj.(*Job); ok && j.TraceID == "" {
		j.TraceID = TraceOfClaim(claim) // as FromHash
	}
	decoded(obj)
	return nil
}

// decodeField decodes s into the field f of the struct v (of the hash key).
func decodeField(key string, v reflect.Value, f fieldInfo, s string) error {
	if err := decodeValue(s, v.Field(f.index)); err != nil {
		return &DecodeError{Key: key, Field: f.name, Value: s, Err: err}
	}
	return nil
}

// decoded completes an object read from its hash: a job's times in s and ms from its
// µs ones (Job.deriveTimes).
func decoded(obj any) {
	if j, ok := obj.(*Job); ok {
		j.deriveTimes()
		j.defaultLists()
	}
}

var rawMessageType = reflect.TypeOf(json.RawMessage(nil))

// emptySlices caches, per slice type, an empty non-nil slice of capacity 0 (as a
// reflect.Value): reflect.MakeSlice allocates a slice header for each call. Sharing
// it is safe: an append to a slice of capacity 0 allocates a new array.
var emptySlices sync.Map // reflect.Type → reflect.Value

func emptySlice(t reflect.Type) reflect.Value {
	if v, ok := emptySlices.Load(t); ok {
		return v.(reflect.Value)
	}
	v := reflect.MakeSlice(t, 0, 0)
	emptySlices.Store(t, v)
	return v
}

func decodeValue(s string, v reflect.Value) error {
	switch v.Kind() {
	case reflect.String:
		if v.Type() != reflect.TypeOf("") {
			s = normalizeEnum(s) // a named string type is an enum
		}
		v.SetString(s)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return decodeInt(s, v)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return decodeUint(s, v)
	case reflect.Bool:
		return decodeBool(s, v)
	}
	return decodeJSON(s, v)
}

// decodeInt reads a signed integer; a float that is a whole number ("3.0") is
// accepted, the empty string is zero.
func decodeInt(s string, v reflect.Value) error {
	if s == "" {
		v.SetInt(0)
		return nil
	}
	n, err := strconv.ParseInt(s, 10, v.Type().Bits())
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != float64(int64(f)) {
			return fmt.Errorf("not an integer")
		}
		n = int64(f)
	}
	v.SetInt(n)
	return nil
}

// decodeUint reads an unsigned integer as decodeInt reads a signed one.
func decodeUint(s string, v reflect.Value) error {
	if s == "" {
		v.SetUint(0)
		return nil
	}
	n, err := strconv.ParseUint(s, 10, v.Type().Bits())
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f < 0 || f != float64(uint64(f)) || v.OverflowUint(uint64(f)) {
			return fmt.Errorf("not an unsigned integer of %d bits", v.Type().Bits())
		}
		n = uint64(f)
	}
	v.SetUint(n)
	return nil
}

func decodeBool(s string, v reflect.Value) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		v.SetBool(true)
	case "false", "0", "no", "":
		v.SetBool(false)
	default:
		return fmt.Errorf("not a boolean")
	}
	return nil
}

// decodeJSON reads a field stored as JSON (a struct, map, list or raw message);
// the empty string and "null" are the zero value.
func decodeJSON(s string, v reflect.Value) error {
	if strings.TrimSpace(s) == "" || s == "null" {
		v.Set(reflect.Zero(v.Type()))
		return nil
	}
	// The common cases without the decoder: a raw JSON field (checked, copied), and
	// an empty object or list (as json.Unmarshal leaves them: empty, not nil).
	switch {
	case v.Type() == rawMessageType:
		if !json.Valid([]byte(s)) {
			return fmt.Errorf("not JSON")
		}
		v.SetBytes([]byte(strings.TrimSpace(s))) // as json.Unmarshal: the value, not the space around it
		return nil
	case s == "{}" && v.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		return nil
	case s == "[]" && v.Kind() == reflect.Slice:
		v.Set(emptySlice(v.Type()))
		return nil
	}
	p := reflect.New(v.Type())
	if err := json.Unmarshal([]byte(s), p.Interface()); err != nil {
		return fmt.Errorf("not JSON of the field's type: %v", err)
	}
	v.Set(p.Elem())
	return nil
}
