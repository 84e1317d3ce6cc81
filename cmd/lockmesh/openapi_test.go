package main

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// openapi.json is the HTTP API's contract for clients in other languages:
// these tests fail when it and the server drift apart.

type openAPI struct {
	Paths      map[string]map[string]json.RawMessage
	Components struct {
		Schemas map[string]struct {
			Properties map[string]struct {
				Enum []string
			}
			Required []string
		}
	}
}

type openAPIOp struct {
	OperationID string
	Security    *[]any
	Responses   map[string]json.RawMessage
}

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	var doc openAPI
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

// TestOpenAPIRoutes: the document has exactly the server's routes, each
// operation says whether it needs a token as the route does, answers a
// 2xx, and lists 401 when the route needs a token and 403 when it needs a
// permission.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := map[string]openAPIOp{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op openAPIOp
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			documented[strings.ToUpper(method)+" "+path] = op
		}
	}
	served := map[string]route{}
	for _, rt := range (&httpAPI{}).routes() {
		served[rt.method+" "+rt.path] = rt
	}
	for k := range served {
		if _, ok := documented[k]; !ok {
			t.Errorf("served but not in openapi.json: %s", k)
		}
	}
	for k, op := range documented {
		rt, ok := served[k]
		if !ok {
			t.Errorf("in openapi.json but not served: %s", k)
			continue
		}
		public := op.Security != nil && len(*op.Security) == 0
		if public != rt.public {
			t.Errorf("%s: the document says public %v, the route %v", k, public, rt.public)
		}
		has2xx := false
		for code := range op.Responses {
			has2xx = has2xx || strings.HasPrefix(code, "2")
		}
		if !has2xx {
			t.Errorf("%s: no 2xx answer documented", k)
		}
		if !rt.public && op.Responses["401"] == nil {
			t.Errorf("%s: needs a token, and the document lists no 401", k)
		}
		if rt.perm != permNone && op.Responses["403"] == nil {
			t.Errorf("%s: needs a permission, and the document lists no 403", k)
		}
	}
}

// TestOpenAPISchemas: each schema has the fields of the Go type the server
// encodes or decodes, and a response's fields that are always present are
// required.
func TestOpenAPISchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	for name, tc := range map[string]struct {
		v        any
		response bool
	}{
		"Grant": {grantJSON{}, true}, "Holder": {holderJSON{}, true}, "Leader": {leaderJSON{}, true},
		"Session": {sessionJSON{}, true}, "Voters": {votersJSON{}, true}, "Problem": {problem{}, true},
		"AcquireRequest": {acquireRequest{}, false}, "ValueRequest": {valueRequest{}, false},
		"CreateSessionRequest": {createSessionRequest{}, false},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var fields, always []string
		rt := reflect.TypeOf(tc.v)
		for i := range rt.NumField() {
			tag := rt.Field(i).Tag.Get("json")
			n, opts, _ := strings.Cut(tag, ",")
			fields = append(fields, n)
			if !strings.Contains(opts, "omitempty") {
				always = append(always, n)
			}
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(fields)
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("schema %s has %v, the Go type %v", name, props, fields)
		}
		for _, r := range s.Required {
			if !slices.Contains(fields, r) {
				t.Errorf("schema %s requires %q, which the Go type lacks", name, r)
			}
		}
		if tc.response {
			for _, a := range always {
				if !slices.Contains(s.Required, a) {
					t.Errorf("schema %s: %q is always sent but not required", name, a)
				}
			}
		}
	}
}

// TestOpenAPIProblemCodes: the document lists exactly the server's codes.
func TestOpenAPIProblemCodes(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := doc.Components.Schemas["Problem"].Properties["code"].Enum
	var served []string
	for c := range problemCodes {
		served = append(served, c)
	}
	sort.Strings(documented)
	sort.Strings(served)
	if !slices.Equal(documented, served) {
		t.Errorf("Problem.code lists %v, the server has %v", documented, served)
	}
}

// TestOpenAPIServed: the agent serves the document, without a token.
func TestOpenAPIServed(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{tokens: testTokens()})
	a := at.must(t, 200, "GET", "/v1/openapi.json", nil, "")
	if a.raw != string(openAPIDoc) {
		t.Error("served document differs from openapi.json")
	}
}
