package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"avatarsvc/shared/domain"
)

// MaxBodyBytes bounds JSON bodies: a Lambda request payload is at most 6 MB.
const MaxBodyBytes = 6 << 20

func encode[T any](w http.ResponseWriter, status int, v T) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON object body into T, turning every way it can be wrong
// into an Invalid or TooLarge error that says what to fix.
func decode[T any](r *http.Request) (T, error) {
	var v T
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return v, domain.Errorf(domain.Invalid, "Content-Type must be application/json").
				WithSuggestion("Send the body as JSON with Content-Type: application/json")
		}
	}
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&v); err != nil {
		return v, decodeError(err)
	}
	if dec.More() {
		return v, domain.Errorf(domain.Invalid, "Request body must be a single JSON object")
	}
	return v, nil
}

func decodeError(err error) error {
	var (
		syntax   *json.SyntaxError
		typeErr  *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return domain.Errorf(domain.Invalid, "Request body is required").WithSuggestion("Send a JSON object")
	case errors.As(err, &tooLarge):
		return domain.Errorf(domain.TooLarge, "Request body is too large").
			WithSuggestion(fmt.Sprintf("Bodies are limited to %d bytes", tooLarge.Limit))
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return domain.Errorf(domain.Invalid, "Request body is not valid JSON").
			WithSuggestion("Check the JSON syntax near byte " + fmt.Sprint(offsetOf(syntax)))
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return domain.Errorf(domain.Invalid, "Request body must be a JSON object")
		}
		return domain.Errorf(domain.Invalid, "Field %s must be %s", field, jsonKind(typeErr.Type.Kind().String()))
	}
	return domain.Errorf(domain.Invalid, "Request body could not be read: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func offsetOf(s *json.SyntaxError) int64 {
	if s == nil {
		return 0
	}
	return s.Offset
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "map", "struct", "ptr":
		return "an object"
	case "slice", "array":
		return "an array"
	case "int", "int64", "float64":
		return "a number"
	}
	return "of another type"
}
