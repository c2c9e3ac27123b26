package httpapi

import _ "embed"

// OpenAPI is the API reference (openapi.yaml, OpenAPI 3.1). Tests check
// that every route is in it and that real responses validate against it.
//
//go:embed openapi.yaml
var OpenAPI []byte
