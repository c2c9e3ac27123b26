package httpapi_test

import (
	"net/url"
	"testing"
)

// TestListsPage: every list endpoint pages with limit and next_cursor, and a
// cursor only reads the caller's own items.
func TestListsPage(t *testing.T) {
	skipShort(t)
	acct, other := newAccount(t, "pro"), newAccount(t, "pro")
	for i := 0; i < 5; i++ {
		createSession(t, acct.LiveKey)
		agent := createAgent(t, acct.LiveKey, map[string]any{"name": "a", "avatar_id": "catalog/nasa/eileen-collins"})
		createLink(t, acct.LiveKey, map[string]any{"agent_id": agent["agent_id"]})
	}
	for _, list := range []struct{ path, field string }{
		{"/v1/sessions", "sessions"}, {"/v1/agents", "agents"}, {"/v1/links", "links"},
	} {
		t.Run(list.path, func(t *testing.T) {
			seen, pages, cursor := map[string]bool{}, 0, ""
			for {
				q := url.Values{"limit": {"2"}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				m := call(t, "GET", list.path+"?"+q.Encode(), acct.LiveKey, nil).JSON(t)
				items := m[list.field].([]any)
				if len(items) > 2 {
					t.Fatalf("page of %d, want at most 2", len(items))
				}
				for _, it := range items {
					b, _ := it.(map[string]any)
					id := b["session_id"]
					if id == nil {
						id = b["agent_id"]
					}
					if id == nil {
						id = b["link_id"]
					}
					seen[id.(string)] = true
				}
				pages++
				next, _ := m["next_cursor"].(string)
				if next == "" {
					break
				}
				if pages == 1 {
					// Another tenant cannot use it.
					res := call(t, "GET", list.path+"?cursor="+url.QueryEscape(next), other.LiveKey, nil)
					assertStructuredError(t, res, 400, "Invalid cursor")
				}
				cursor = next
			}
			if len(seen) < 5 || pages < 3 {
				t.Errorf("items over all pages: got %d in %d pages, want >= 5 in >= 3", len(seen), pages)
			}
		})
	}
	assertStructuredError(t, call(t, "GET", "/v1/sessions?limit=0", acct.LiveKey, nil), 400, `Invalid limit "0"`)
	assertStructuredError(t, call(t, "GET", "/v1/avatars?limit=1000", acct.LiveKey, nil), 400, `Invalid limit "1000"`)
	assertStructuredError(t, call(t, "GET", "/v1/links?cursor=not-a-cursor!", acct.LiveKey, nil), 400, "Invalid cursor")
}
