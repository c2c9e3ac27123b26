package httpapi

import (
	"log/slog"
	"net/http"

	"avatarsvc/shared/domain"
)

// errorStyle is one of the spec's failure body shapes.
type errorStyle int

const (
	structured    errorStyle = iota // {"success":false,"error":{"message":...,"suggestion":...}}
	successString                   // {"success":false,"error":"..."}
	plainString                     // {"error":"..."}
)

// rateLimitBody is the plain-text 429 body.
const rateLimitBody = "Too many requests, please slow down."

// statusOf maps domain codes to HTTP statuses, using only the statuses the
// spec lists (so state conflicts are 400, not 409).
func statusOf(code domain.Code) int {
	switch code {
	case domain.Invalid, domain.Conflict, domain.TooLarge:
		return http.StatusBadRequest
	case domain.Unauthorized:
		return http.StatusUnauthorized
	case domain.Forbidden, domain.LimitExceeded:
		return http.StatusForbidden
	case domain.NotFound:
		return http.StatusNotFound
	case domain.NotAllowed:
		return http.StatusMethodNotAllowed
	case domain.Unacceptable:
		return http.StatusUnsupportedMediaType
	case domain.RateLimited:
		return http.StatusTooManyRequests
	case domain.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

type errorDetail struct {
	Message    string `json:"message"`
	Suggestion string `json:"suggestion,omitempty"`
}

// writeError is the one place a failure becomes a response. status 0 means
// "from the code". Authentication failures always use the string shape, and
// rate limiting always the plain-text body, whatever the route's style.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, style errorStyle, err error, status int) {
	code := domain.ErrorCode(err)
	msg, suggestion := domain.ErrorMessage(err)
	if status == 0 {
		status = statusOf(code)
	}
	if status >= 500 {
		log.ErrorContext(r.Context(), "request failed", "err", err, "status", status)
	}
	switch {
	case code == domain.RateLimited:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(rateLimitBody))
	case code == domain.Unauthorized || style == plainString:
		encode(w, status, map[string]string{"error": msg})
	case style == successString:
		encode(w, status, map[string]any{"success": false, "error": msg})
	default:
		encode(w, status, map[string]any{"success": false, "error": errorDetail{Message: msg, Suggestion: suggestion}})
	}
}
