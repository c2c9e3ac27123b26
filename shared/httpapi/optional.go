package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"avatarsvc/shared/domain"
)

// optional is a JSON field that tells absent (Set false), null (Null) and a
// value apart, for partial updates where null means "remove".
type optional[T any] struct {
	Set, Null bool
	Value     T
}

func (o *optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.Value)
}

// ptr is the value of a set, non-null field, else nil.
func (o optional[T]) ptr() *T {
	if !o.Set || o.Null {
		return nil
	}
	return &o.Value
}

// pageOf reads a list's limit and cursor query parameters.
func pageOf(r *http.Request) (domain.Page, error) {
	q := r.URL.Query()
	p := domain.Page{Limit: domain.DefaultPageLimit, Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > domain.MaxPageLimit {
			return p, domain.Errorf(domain.Invalid, "Invalid limit %q", v).
				WithSuggestion("Pass limit as an integer from 1 to " + strconv.Itoa(domain.MaxPageLimit))
		}
		p.Limit = n
	}
	return p, nil
}

// cursorOrNull is a list's next_cursor: null on the last page.
func cursorOrNull(c string) *string {
	if c == "" {
		return nil
	}
	return &c
}

// flexibleID is an id given as a JSON string or integer.
type flexibleID string

func (f *flexibleID) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*f = flexibleID(n.String())
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return domain.Errorf(domain.Invalid, "ids must be strings or integers")
	}
	*f = flexibleID(s)
	return nil
}

// DynamoDB's limits on stored values: 32 levels of nesting, numbers of
// magnitude up to 1e125 (and not below 1e-130 unless zero).
const (
	maxNesting   = 32
	maxMagnitude = 1e125
	minMagnitude = 1e-130
)

// checkStorable refuses JSON values DynamoDB cannot store, with a 400 that
// says why, rather than a 500 from the write.
func checkStorable(values ...any) error {
	for _, v := range values {
		if err := storable(v, 1); err != nil {
			return err
		}
	}
	return nil
}

func storable(v any, depth int) error {
	switch x := v.(type) {
	case map[string]any:
		if depth > maxNesting {
			return tooDeep()
		}
		for _, e := range x {
			if err := storable(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		if depth > maxNesting {
			return tooDeep()
		}
		for _, e := range x {
			if err := storable(e, depth+1); err != nil {
				return err
			}
		}
	case float64:
		if a := abs(x); a > maxMagnitude || (a != 0 && a < minMagnitude) {
			return domain.Errorf(domain.Invalid, "A number is out of the storable range").
				WithSuggestion("Numbers must be zero or between 1e-130 and 1e125 in magnitude; send larger values as strings")
		}
	}
	return nil
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func tooDeep() error {
	return domain.Errorf(domain.Invalid, "JSON is nested too deeply").
		WithSuggestion("Objects and arrays may be nested at most 32 levels deep")
}

// handleList is every list endpoint: it reads the page parameters, asks
// list for one page of the caller's items and answers
// {"success": true, <field>: [views], "next_cursor": ...}.
func handleList[T, V any](field string, list func(r *http.Request, userID string, page domain.Page) ([]T, string, error), view func(T) V) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		page, err := pageOf(r)
		if err != nil {
			return err
		}
		items, next, err := list(r, principal(r.Context()).UserID, page)
		if err != nil {
			return err
		}
		views := make([]V, len(items))
		for i, it := range items {
			views[i] = view(it)
		}
		encode(w, http.StatusOK, map[string]any{"success": true, field: views, "next_cursor": cursorOrNull(next)})
		return nil
	}
}
