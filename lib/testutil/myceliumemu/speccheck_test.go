package myceliumemu_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// A minimal OpenAPI 3 checker for the exchanges between the client and the
// emulator. For each request/response it asserts that the path and method
// exist in testdata/api.yaml, that query and path parameters are declared and
// well formed, that the status code is declared for the operation, and that
// JSON bodies use exactly the schema's property names with the declared
// types and formats (format: byte = standard base64, hex with its lengths,
// ipv6). It knows the schema keywords api.yaml uses: $ref, type, properties,
// items, oneOf, enum, format, minLength, maxLength, minimum, maximum,
// nullable.

type apiSpec struct {
	root  map[string]any
	paths map[string]map[string]any // template → method → operation
}

func loadSpec(path string) (*apiSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := parseYAML(string(b))
	if err != nil {
		return nil, err
	}
	root, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("spec is not a mapping")
	}
	s := &apiSpec{root: root, paths: map[string]map[string]any{}}
	paths, _ := root["paths"].(map[string]any)
	for p, ops := range paths {
		m := map[string]any{}
		for method, op := range ops.(map[string]any) {
			m[strings.ToUpper(method)] = op
		}
		s.paths[p] = m
	}
	return s, nil
}

// exchange is one recorded request and its response.
type exchange struct {
	Method, Path, RawQuery, ReqType string // Path is the escaped path
	ReqBody                         []byte
	Status                          int
	RespType                        string
	RespBody                        []byte
	// Negative marks a deliberately malformed request (sent with the
	// negativeHeader): only its response is checked.
	Negative bool
}

// negativeHeader marks requests that are malformed on purpose.
const negativeHeader = "X-Conformance-Negative"

func (e exchange) String() string {
	q := ""
	if e.RawQuery != "" {
		q = "?" + e.RawQuery
	}
	return fmt.Sprintf("%s %s%s → %d", e.Method, e.Path, q, e.Status)
}

// recorder is an http.RoundTripper that records every exchange.
type recorder struct {
	mu   sync.Mutex
	next http.RoundTripper
	ex   []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	r.mu.Lock()
	r.ex = append(r.ex, exchange{req.Method, req.URL.EscapedPath(), req.URL.RawQuery,
		req.Header.Get("Content-Type"), body, resp.StatusCode, resp.Header.Get("Content-Type"), rb,
		req.Header.Get(negativeHeader) != ""})
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.ex...)
}

// match finds the operation for method and escaped path. Literal segments
// win over templates. It returns the template, the operation and the path
// parameters (unescaped).
func (s *apiSpec) match(method, escPath string) (string, map[string]any, map[string]string, error) {
	segs := strings.Split(strings.TrimPrefix(escPath, "/"), "/")
	best, bestLit := "", -1
	var bestParams map[string]string
	for tmpl, ops := range s.paths {
		if _, ok := ops[method]; !ok {
			continue
		}
		ts := strings.Split(strings.TrimPrefix(tmpl, "/"), "/")
		if len(ts) != len(segs) {
			continue
		}
		lit, params, ok := 0, map[string]string{}, true
		for i, t := range ts {
			seg, err := url.PathUnescape(segs[i])
			if err != nil {
				ok = false
				break
			}
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				params[t[1:len(t)-1]] = seg
				continue
			}
			if t != seg {
				ok = false
				break
			}
			lit++
		}
		if ok && lit > bestLit {
			best, bestLit, bestParams = tmpl, lit, params
		}
	}
	if best == "" {
		return "", nil, nil, fmt.Errorf("no operation %s %s in the spec", method, escPath)
	}
	return best, s.paths[best][method].(map[string]any), bestParams, nil
}

// check validates one exchange and returns the operationId and problems.
func (s *apiSpec) check(e exchange) (string, []string) {
	_, op, pathParams, err := s.match(e.Method, e.Path)
	if err != nil {
		return "", []string{err.Error()}
	}
	opID, _ := op["operationId"].(string)
	var errs []string
	if !e.Negative {
		errs = s.checkRequest(e, op, pathParams)
	}
	return opID, s.checkResponse(e, op, opID, errs)
}

// checkRequest validates parameters and the request body.
func (s *apiSpec) checkRequest(e exchange, op map[string]any, pathParams map[string]string) []string {
	var errs []string
	bad := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }

	// Parameters.
	declared := map[string]map[string]any{} // "in/name" → parameter
	params, _ := op["parameters"].([]any)
	for _, p := range params {
		pm := p.(map[string]any)
		declared[pm["in"].(string)+"/"+pm["name"].(string)] = pm
	}
	for name, v := range pathParams {
		p, ok := declared["path/"+name]
		if !ok {
			bad("path parameter %q not declared", name)
			continue
		}
		for _, m := range s.validateParam(p["schema"], v, "path "+name) {
			bad("%s", m)
		}
	}
	q, err := url.ParseQuery(e.RawQuery)
	if err != nil {
		bad("query %q: %v", e.RawQuery, err)
	}
	for name, vs := range q {
		p, ok := declared["query/"+name]
		if !ok {
			bad("query parameter %q not declared", name)
			continue
		}
		if len(vs) != 1 {
			bad("query parameter %q repeated", name)
		}
		for _, m := range s.validateParam(p["schema"], vs[0], "query "+name) {
			bad("%s", m)
		}
	}
	for k, p := range declared {
		if p["required"] == true && strings.HasPrefix(k, "query/") && !q.Has(strings.TrimPrefix(k, "query/")) {
			bad("required %s missing", k)
		}
	}

	// Request body.
	if rb, ok := op["requestBody"].(map[string]any); ok {
		content := rb["content"].(map[string]any)
		mt, _, _ := mime.ParseMediaType(e.ReqType)
		media, ok := content[mt].(map[string]any)
		if !ok {
			bad("request content type %q not declared", e.ReqType)
		} else {
			for _, m := range s.validateJSON(media["schema"], e.ReqBody, "request") {
				bad("%s", m)
			}
		}
	} else if len(e.ReqBody) > 0 {
		bad("request body sent to an operation without one")
	}
	return errs
}

// checkResponse validates the status and the response body, appending to
// errs.
func (s *apiSpec) checkResponse(e exchange, op map[string]any, opID string, errs []string) []string {
	bad := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	resps, _ := op["responses"].(map[string]any)
	r, ok := resps[strconv.Itoa(e.Status)].(map[string]any)
	if !ok {
		bad("status %d not declared for %s", e.Status, opID)
		return errs
	}
	content, hasContent := r["content"].(map[string]any)
	if !hasContent {
		if len(e.RespBody) > 0 {
			bad("status %d declares no body, got %q", e.Status, e.RespBody)
		}
		return errs
	}
	mt, _, _ := mime.ParseMediaType(e.RespType)
	media, ok := content[mt].(map[string]any)
	if !ok {
		bad("response content type %q not declared for %d", e.RespType, e.Status)
		return errs
	}
	for _, m := range s.validateJSON(media["schema"], e.RespBody, "response") {
		bad("%s", m)
	}
	return errs
}

// validateParam checks a query or path parameter's text against its schema.
func (s *apiSpec) validateParam(schema any, v, where string) []string {
	sc := s.resolve(schema)
	switch sc["type"] {
	case "integer":
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return []string{fmt.Sprintf("%s: %q is not an integer", where, v)}
		}
		return s.validate(sc, json.Number(v), where)
	case "boolean":
		if v != "true" && v != "false" {
			return []string{fmt.Sprintf("%s: %q is not a boolean", where, v)}
		}
		return nil
	default:
		return s.validate(sc, v, where)
	}
}

func (s *apiSpec) validateJSON(schema any, body []byte, where string) []string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{fmt.Sprintf("%s: body %q is not JSON: %v", where, body, err)}
	}
	if dec.More() {
		return []string{fmt.Sprintf("%s: trailing data after JSON", where)}
	}
	return s.validate(schema, v, where)
}

// resolve follows $ref.
func (s *apiSpec) resolve(schema any) map[string]any {
	m, _ := schema.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = s.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m
}

func num(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// validate checks a decoded JSON value (numbers as json.Number) against
// schema.
func (s *apiSpec) validate(schema any, v any, where string) []string {
	sc := s.resolve(schema)
	if sc == nil {
		return []string{fmt.Sprintf("%s: unresolvable schema", where)}
	}
	if v == nil {
		if sc["nullable"] == true {
			return nil
		}
		return []string{fmt.Sprintf("%s: null where the schema is not nullable", where)}
	}
	if alts, ok := sc["oneOf"].([]any); ok {
		return s.validateOneOf(alts, v, where)
	}
	typ, _ := sc["type"].(string)
	if typ == "" {
		if _, ok := sc["properties"]; ok {
			typ = "object"
		} else if _, ok := v.(string); ok {
			typ = "string"
		}
	}
	switch typ {
	case "object":
		return s.validateObject(sc, v, where)
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return []string{badf(where, "want an array, got %T", v)}
		}
		var errs []string
		for i, item := range arr {
			errs = append(errs, s.validate(sc["items"], item, fmt.Sprintf("%s[%d]", where, i))...)
		}
		return errs
	case "string":
		return validateString(sc, v, where)
	case "integer":
		return validateInteger(sc, v, where)
	case "boolean":
		if _, ok := v.(bool); !ok {
			return []string{badf(where, "want a boolean, got %T", v)}
		}
		return nil
	case "":
		return []string{badf(where, "schema without a type for %v", v)}
	default:
		return []string{badf(where, "unsupported schema type %q", typ)}
	}
}

// badf is a validation error at where.
func badf(where, f string, a ...any) string { return where + ": " + fmt.Sprintf(f, a...) }

// validateOneOf checks that v matches exactly one of the alternatives.
func (s *apiSpec) validateOneOf(alts []any, v any, where string) []string {
	n := 0
	var all []string
	for i, a := range alts {
		errs := s.validate(a, v, where)
		if len(errs) == 0 {
			n++
		} else {
			all = append(all, fmt.Sprintf("[%d] %s", i, strings.Join(errs, "; ")))
		}
	}
	if n != 1 {
		return []string{fmt.Sprintf("%s: %v matches %d of the oneOf alternatives (%s)", where, v, n, strings.Join(all, " | "))}
	}
	return nil
}

// validateObject checks that every field of v is a property of the schema, and
// valid (in the order of their names).
func (s *apiSpec) validateObject(sc map[string]any, v any, where string) []string {
	obj, ok := v.(map[string]any)
	if !ok {
		return []string{badf(where, "want an object, got %T", v)}
	}
	props, _ := sc["properties"].(map[string]any)
	if props == nil {
		return nil
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	sort.Strings(names)
	var errs []string
	for _, k := range names {
		ps, ok := props[k]
		if !ok {
			errs = append(errs, badf(where, "field %q is not a property of the schema", k))
			continue
		}
		errs = append(errs, s.validate(ps, obj[k], where+"."+k)...)
	}
	return errs
}

// validateString checks a string's length, enum and format.
func validateString(sc map[string]any, v any, where string) []string {
	str, ok := v.(string)
	if !ok {
		return []string{badf(where, "want a string, got %T", v)}
	}
	var errs []string
	if mn, ok := num(sc["minLength"]); ok && float64(len(str)) < mn {
		errs = append(errs, badf(where, "%q shorter than %v", str, mn))
	}
	if mx, ok := num(sc["maxLength"]); ok && float64(len(str)) > mx {
		errs = append(errs, badf(where, "%q longer than %v", str, mx))
	}
	if enum, ok := sc["enum"].([]any); ok && !slices.Contains(enum, any(str)) {
		errs = append(errs, badf(where, "%q not in %v", str, enum))
	}
	if msg := badFormat(sc["format"], str); msg != "" {
		errs = append(errs, badf(where, "%s", msg))
	}
	return errs
}

// badFormat says why str is not of the format ("byte", "hex", "ipv6"; others are
// not checked), or "".
func badFormat(format any, str string) string {
	switch format {
	case "byte":
		if _, err := base64.StdEncoding.Strict().DecodeString(str); err != nil {
			return fmt.Sprintf("%q is not standard base64: %v", str, err)
		}
	case "hex":
		if _, err := hex.DecodeString(str); err != nil {
			return fmt.Sprintf("%q is not hex", str)
		}
	case "ipv6":
		if a, err := netip.ParseAddr(str); err != nil || !a.Is6() {
			return fmt.Sprintf("%q is not an IPv6 address", str)
		}
	}
	return ""
}

// validateInteger checks an integer (a json.Number) and its bounds.
func validateInteger(sc map[string]any, v any, where string) []string {
	n, ok := v.(json.Number)
	if !ok {
		return []string{badf(where, "want an integer, got %T", v)}
	}
	i, err := n.Int64()
	if err != nil {
		return []string{badf(where, "%s is not an integer", n)}
	}
	var errs []string
	if mn, ok := num(sc["minimum"]); ok && float64(i) < mn {
		errs = append(errs, badf(where, "%d below %v", i, mn))
	}
	if mx, ok := num(sc["maximum"]); ok && float64(i) > mx {
		errs = append(errs, badf(where, "%d above %v", i, mx))
	}
	return errs
}
