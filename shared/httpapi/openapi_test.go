package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"avatarsvc/shared/httpapi"
)

var (
	specOnce   sync.Once
	spec       *openapi3.T
	specRouter routers.Router
	specErr    error
)

func loadSpec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		spec, specErr = openapi3.NewLoader().LoadFromData(httpapi.OpenAPI)
		if specErr == nil {
			specErr = spec.Validate(context.Background())
		}
		if specErr == nil {
			// Route by path only (checkAgainstSpec strips the prefix): the
			// servers' origin is make run's address.
			spec.Servers = nil
			specRouter, specErr = gorillamux.NewRouter(spec)
		}
	})
	if specErr != nil {
		t.Fatalf("openapi.yaml: %v", specErr)
	}
	return spec, specRouter
}

// TestOpenAPICoversEveryRoute: each route of routes.go is an operation of
// openapi.yaml whose operationId is the route's name (an OPTIONS preflight's
// with "-preflight"), both prefixes are its servers, and the document has
// nothing the API does not serve.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	doc := loadDoc(t)
	var servers []string
	for _, s := range doc.Servers {
		servers = append(servers, strings.TrimPrefix(s.URL, "{origin}"))
	}
	if !slices.Equal(servers, httpapi.Prefixes) {
		t.Errorf("servers: got %q, want {origin} followed by each of %q", servers, httpapi.Prefixes)
	}
	served := map[string]bool{}
	ids := map[string]string{}
	for _, rt := range httpapi.Routes(httpapi.Deps{}) {
		path := strings.ReplaceAll(rt.Path, "...}", "}")
		key := rt.Method + " " + path
		served[key] = true
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(rt.Method) == nil {
			t.Errorf("%s (route %s) is not in openapi.yaml", key, rt.Name)
			continue
		}
		want := rt.Name
		if rt.Method == http.MethodOptions {
			want += "-preflight"
		}
		if got := item.GetOperation(rt.Method).OperationID; got != want {
			t.Errorf("%s: operationId got %q, want %q", key, got, want)
		}
		if other, dup := ids[want]; dup {
			t.Errorf("operationId %q is on %s and %s", want, other, key)
		}
		ids[want] = key
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+path] {
				t.Errorf("openapi.yaml documents %s %s, which no route serves", method, path)
			}
		}
	}
}

// loadDoc is the document as written, servers included.
func loadDoc(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return doc
}

// checkAgainstSpec validates a real response against openapi.yaml. Paths
// the document cannot express (a catalog id's slashes) and the 404/405
// fallbacks are skipped; any other undocumented response fails the test.
func checkAgainstSpec(t testing.TB, method, path string, res response) {
	t.Helper()
	_, router := loadSpec(t)
	for _, p := range httpapi.Prefixes {
		if rest, ok := strings.CutPrefix(path, p+"/"); ok {
			path = "/" + rest
			break
		}
	}
	req, err := http.NewRequest(method, "http://api"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		if res.Status == 404 || res.Status == 405 || strings.Contains(path, "/catalog/") {
			return
		}
		t.Errorf("%s %s answered %d but is not in openapi.yaml: %v", method, path, res.Status, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 res.Status, Header: res.Header, Body: io.NopCloser(bytes.NewReader(res.Body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: the %d response does not match openapi.yaml: %v\nbody: %.400s", method, path, res.Status, err, res.Body)
	}
}
