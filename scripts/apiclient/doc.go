// Package apiclient is a Go client generated from the API reference
// (shared/httpapi/openapi.yaml) with oapi-codegen, as a customer would
// make one: its tests prove the reference is good enough to generate from
// (the committed client is what the pinned generator makes today) and that
// the generated client drives a session against the real local API.
//
//	c, _ := apiclient.NewClientWithResponses("http://127.0.0.1:8080/v1", apiclient.WithRequestEditorFn(apiKey))
//	created, _ := c.SessionsCreateWithResponse(ctx, apiclient.SessionsCreateJSONRequestBody{...})
//	started, _ := c.SessionsStartWithResponse(ctx, created.JSON201.Session.SessionId, &apiclient.SessionsStartParams{Wait: &twenty})
package apiclient

//go:generate ../../.local/bin/oapi-codegen -config oapi-codegen.yaml ../../shared/httpapi/openapi.yaml
