package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func createLink(t testing.TB, key string, body map[string]any) map[string]any {
	t.Helper()
	res := call(t, "POST", "/v1/links", key, body)
	if res.Status != http.StatusCreated {
		t.Fatalf("create link: %d %s", res.Status, res.Body)
	}
	return res.JSON(t)["link"].(map[string]any)
}

func startViaLink(t testing.TB, linkID string) response {
	t.Helper()
	return call(t, "POST", "/v1/links/start-session", "", map[string]any{"link_id": linkID})
}

// linkIDOf takes the link id from a link's page url (it is the fragment).
func linkIDOf(t testing.TB, url string) string {
	t.Helper()
	_, id, ok := strings.Cut(url, "#")
	if !ok || !strings.HasPrefix(id, "lnk_") {
		t.Fatalf("link url %q has no #lnk_ fragment", url)
	}
	return id
}

func TestLinksCRUD(t *testing.T) {
	skipShort(t)
	acct, other := newAccount(t, "pro"), newAccount(t, "pro")
	agent := createAgent(t, acct.LiveKey, map[string]any{"name": "Greeter", "avatar_id": "catalog/nasa/eileen-collins"})
	l := createLink(t, acct.LiveKey, map[string]any{"agent_id": agent["agent_id"], "name": "Homepage"})
	id := l["link_id"].(string)

	t.Run("created", func(t *testing.T) {
		if linkIDOf(t, l["url"].(string)) != id || l["status"] != "active" || l["uses"] != 0.0 ||
			l["use_limit"] != nil || l["expires_at"] != nil || l["name"] != "Homepage" || dig(l, "agent", "agent_id") != agent["agent_id"] {
			t.Errorf("new link: got %v", l)
		}
		if len(id) < len("lnk_")+26 {
			t.Errorf("link id %q: want at least 128 random bits", id)
		}
	})
	t.Run("update rules", func(t *testing.T) {
		res := call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"name": nil, "status": "paused", "use_limit": 5})
		got := res.JSON(t)["link"].(map[string]any)
		if res.Status != 200 || got["name"] != nil || got["status"] != "paused" || got["use_limit"] != 5.0 {
			t.Errorf("update: %d %s", res.Status, res.Body)
		}
		res = call(t, "PUT", "/api/v1/links/"+id, acct.LiveKey, map[string]any{"use_limit": nil, "status": "active"})
		if got := res.JSON(t)["link"].(map[string]any); got["use_limit"] != nil || got["status"] != "active" || got["name"] != nil {
			t.Errorf("use_limit null: got %v", got)
		}
		for _, body := range []map[string]any{{"use_limit": 0}, {"use_limit": 2.5}, {"use_limit": -1}} {
			res := call(t, "PUT", "/v1/links/"+id, acct.LiveKey, body)
			if res.Status != 400 || !strings.HasPrefix(dig(res.JSON(t), "error", "message").(string), "use_limit must be a positive integer") {
				t.Errorf("PUT %v: %d %s", body, res.Status, res.Body)
			}
		}
		assertStructuredError(t, call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"status": "gone"}), 400, `Invalid status "gone"`)
		assertStructuredError(t, call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{}), 400, "No fields to update")
		assertStructuredError(t, call(t, "PUT", "/v1/links/"+id, other.LiveKey, map[string]any{"name": "x"}), 404, "Link not found")
		assertStructuredError(t, call(t, "PUT", "/v1/links/lnk_"+strings.Repeat("a", 5000), acct.LiveKey, map[string]any{"name": "x"}), 404, "Link not found")
	})
	t.Run("use_limit must stay above uses", func(t *testing.T) {
		if res := startViaLink(t, id); res.Status != 200 {
			t.Fatalf("start: %d %s", res.Status, res.Body)
		}
		res := call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"use_limit": 1})
		assertStructuredError(t, res, 400, "use_limit must be a positive integer greater than the current uses (1)")
		if res := call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"use_limit": 2}); res.Status != 200 {
			t.Errorf("use_limit 2 with 1 use: %d %s", res.Status, res.Body)
		}
	})
	t.Run("expired right after expires_at", func(t *testing.T) {
		exp := stack.Clock.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
		l2 := createLink(t, acct.LiveKey, map[string]any{"agent_id": agent["agent_id"], "expires_at": exp})
		if l2["status"] != "active" {
			t.Errorf("before expiry: status %v", l2["status"])
		}
		stack.Clock.Advance(time.Minute + time.Millisecond)
		list := call(t, "GET", "/v1/links?status=expired", acct.LiveKey, nil).JSON(t)["links"].([]any)
		if len(list) != 1 || dig(list[0], "link_id") != l2["link_id"] || dig(list[0], "status") != "expired" {
			t.Errorf("expired filter: got %v", list)
		}
		assertStructuredError(t, startViaLink(t, l2["link_id"].(string)), 403, "This link has expired")
		if n := len(call(t, "GET", "/v1/links?status=active", acct.LiveKey, nil).JSON(t)["links"].([]any)); n != 1 {
			t.Errorf("active links: got %d, want 1", n)
		}
		if n := len(call(t, "GET", "/v1/links", acct.LiveKey, nil).JSON(t)["links"].([]any)); n != 2 {
			t.Errorf("all links: got %d, want 2", n)
		}
		assertStructuredError(t, call(t, "GET", "/v1/links?status=bogus", acct.LiveKey, nil), 400, `Invalid status filter "bogus"`)
	})
	t.Run("delete", func(t *testing.T) {
		assertStructuredError(t, call(t, "DELETE", "/v1/links/"+id, other.LiveKey, nil), 404, "Link not found")
		if res := call(t, "DELETE", "/v1/links/"+id, acct.LiveKey, nil); res.Status != 200 {
			t.Errorf("delete: %d %s", res.Status, res.Body)
		}
		assertStructuredError(t, startViaLink(t, id), 404, "Link not found")
	})
}

func TestStartViaLink(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute) // a fresh per-address rate-limit window
	acct := newAccount(t, "free")
	agent := createAgent(t, acct.LiveKey, map[string]any{"name": "Greeter", "avatar_id": "catalog/nasa/eileen-collins"})
	l := createLink(t, acct.LiveKey, map[string]any{"agent_id": agent["agent_id"]})
	id := l["link_id"].(string)

	res := startViaLink(t, id)
	if res.Status != 200 {
		t.Fatalf("start: %d %s", res.Status, res.Body)
	}
	m := res.JSON(t)
	if m["success"] != true || !strings.HasPrefix(m["session_id"].(string), "sess_") || m["rtc_url"] != stack.LiveKit.URL ||
		m["agent_identity"] != "avatar-renderer" || len(m["participant_token"].(string)) < 100 {
		t.Errorf("answer: got %v", m)
	}
	sess := dig(call(t, "GET", "/v1/sessions/"+m["session_id"].(string), acct.LiveKey, nil).JSON(t), "session")
	if dig(sess, "status") != "started" {
		t.Errorf("the link owner's session: got %v, want started", sess)
	}
	if got := dig(call(t, "GET", "/v1/links", acct.LiveKey, nil).JSON(t)["links"].([]any)[0], "uses"); got != 1.0 {
		t.Errorf("uses: got %v, want 1", got)
	}
	// The free plan runs one session at a time: the owner is at the limit.
	assertStructuredError(t, startViaLink(t, id), 403, "Concurrent session limit reached")

	call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"status": "paused"})
	assertStructuredError(t, startViaLink(t, id), 403, "This link is paused")
	assertStructuredError(t, startViaLink(t, "lnk_doesnotexist"), 404, "Link not found")
	assertStructuredError(t, call(t, "POST", "/v1/links/start-session", "", map[string]any{}), 400, "link_id is required")
}

// TestLinkUseLimitUnderLoad: 100 simultaneous starts on a link with
// use_limit 3 give exactly 3 sessions.
func TestLinkUseLimitUnderLoad(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute)
	defer stack.Clock.Advance(time.Minute)
	acct := newAccount(t, "enterprise")
	agent := createAgent(t, acct.LiveKey, map[string]any{"name": "Greeter", "avatar_id": "catalog/nasa/eileen-collins"})
	// One address sends them all: its per-visitor limit is raised to the
	// most, so all 100 race in the start transaction.
	id := createLink(t, acct.LiveKey, map[string]any{"agent_id": agent["agent_id"], "use_limit": 3,
		"max_starts_per_visitor_per_minute": 150})["link_id"].(string)

	statuses := make([]int, 100)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = startViaLink(t, id).Status
		}()
	}
	wg.Wait()
	counts := map[int]int{}
	for _, s := range statuses {
		counts[s]++
	}
	t.Logf("statuses: %v", counts)
	if counts[200] != 3 {
		t.Errorf("successful starts: got %d, want 3 (statuses %v)", counts[200], counts)
	}
	if got := len(call(t, "GET", "/v1/sessions?status=started", acct.LiveKey, nil).JSON(t)["sessions"].([]any)); got != 3 {
		t.Errorf("started sessions: got %d, want 3", got)
	}
	if got := dig(call(t, "GET", "/v1/links", acct.LiveKey, nil).JSON(t)["links"].([]any)[0], "uses"); got != 3.0 {
		t.Errorf("uses: got %v, want 3", got)
	}
	assertStructuredError(t, startViaLink(t, id), 403, "This link has reached its use limit")
}

func TestPreviewLinks(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute)
	acct := newAccount(t, "pro")
	avatarID, _ := uploadFace(t, acct.LiveKey)
	preview := func() string {
		res := call(t, "POST", "/v1/avatars/preview", acct.LiveKey, map[string]any{"avatar_id": avatarID})
		if res.Status != 200 {
			t.Fatalf("preview: %d %s", res.Status, res.Body)
		}
		return linkIDOf(t, res.JSON(t)["url"].(string))
	}
	t.Run("single use", func(t *testing.T) {
		id := preview()
		if res := startViaLink(t, id); res.Status != 200 {
			t.Fatalf("first use: %d %s", res.Status, res.Body)
		}
		assertStructuredError(t, startViaLink(t, id), 403, "This link has reached its use limit")
	})
	t.Run("five minutes", func(t *testing.T) {
		id := preview()
		stack.Clock.Advance(5*time.Minute + time.Second)
		assertStructuredError(t, startViaLink(t, id), 403, "This link has expired")
	})
	t.Run("hidden from lists", func(t *testing.T) {
		if n := len(call(t, "GET", "/v1/links", acct.LiveKey, nil).JSON(t)["links"].([]any)); n != 0 {
			t.Errorf("links: got %d, want previews hidden", n)
		}
		if n := len(call(t, "GET", "/v1/agents", acct.LiveKey, nil).JSON(t)["agents"].([]any)); n != 0 {
			t.Errorf("agents: got %d, want temporary agents hidden", n)
		}
	})
}

// TestLinkDispatchesALiveKitAgent: a link whose agent's voice agent is a
// LiveKit agent has that agent dispatched into the session's room, with the
// avatar's identity in the job metadata.
func TestLinkDispatchesALiveKitAgent(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute)
	acct := newAccount(t, "pro")
	allowVoiceAgent(t, acct, "livekit", "concierge-agent")
	agent := createAgent(t, acct.LiveKey, map[string]any{
		"name": "Concierge", "avatar_id": "catalog/nasa/eileen-collins", "custom_greeting": "Welcome!",
		"voice_agent": map[string]any{"provider": "livekit", "agent_id": "concierge-agent", "auth_method": "none"},
	})
	l := createLink(t, acct.LiveKey, map[string]any{"agent_id": agent["agent_id"]})
	res := startViaLink(t, l["link_id"].(string))
	if res.Status != 200 {
		t.Fatalf("start: %d %s", res.Status, res.Body)
	}
	id := res.JSON(t)["session_id"].(string)
	list, err := stack.App.Rooms.Dispatches(context.Background(), "avatar-link-"+id)
	if err != nil {
		t.Fatal(err)
	}
	// LiveKit also lists its own automatic dispatch (no agent name).
	var ours []string
	for _, d := range list {
		if d.AgentName != "" {
			if d.AgentName != "concierge-agent" {
				t.Errorf("dispatched %q, want concierge-agent", d.AgentName)
			}
			ours = append(ours, d.Metadata)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("named dispatches: got %+v, want one for concierge-agent", list)
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(ours[0]), &md); err != nil {
		t.Fatalf("metadata %q: %v", ours[0], err)
	}
	if md["avatar_identity"] != "avatar-renderer" || md["session_id"] != id || md["custom_greeting"] != "Welcome!" {
		t.Errorf("job metadata: got %v", md)
	}
}
