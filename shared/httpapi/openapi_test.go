package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
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
			// Route by path only: the servers entry is make run's address.
			spec.Servers = nil
			specRouter, specErr = gorillamux.NewRouter(spec)
		}
	})
	if specErr != nil {
		t.Fatalf("openapi.yaml: %v", specErr)
	}
	return spec, specRouter
}

// TestOpenAPICoversEveryRoute: each route of routes.go, under both
// prefixes, is an operation of openapi.yaml, and the document has nothing
// the API does not serve.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	doc, _ := loadSpec(t)
	served := map[string]bool{}
	for _, rt := range httpapi.Routes(httpapi.Deps{}) {
		for _, p := range httpapi.Prefixes {
			path := strings.ReplaceAll(p+rt.Path, "...}", "}")
			key := rt.Method + " " + path
			served[key] = true
			item := doc.Paths.Find(path)
			if item == nil || item.GetOperation(rt.Method) == nil {
				t.Errorf("%s (route %s) is not in openapi.yaml", key, rt.Name)
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+path] {
				t.Errorf("openapi.yaml documents %s %s, which no route serves", method, path)
			}
		}
	}
}

// checkAgainstSpec validates a real response against openapi.yaml. Paths
// the document cannot express (a catalog id's slashes) and the 404/405
// fallbacks are skipped; any other undocumented response fails the test.
func checkAgainstSpec(t testing.TB, method, path string, res response) {
	t.Helper()
	_, router := loadSpec(t)
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
