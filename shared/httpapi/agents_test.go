package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"avatarsvc/scripts/stacktest"
)

func agentBody(avatarID string) map[string]any {
	return map[string]any{
		"name": "Support", "avatar_id": avatarID, "language": "en", "custom_greeting": "Hi there",
		"context": "You help with billing.", "properties": map[string]any{"tone": "warm", "n": 2},
		"memories": []any{"likes tea"}, "knowledge_base": []any{map[string]any{"title": "FAQ"}},
		"voice_agent": map[string]any{"provider": "elevenlabs", "agent_id": "agent_123", "auth_method": "none"},
	}
}

func createAgent(t testing.TB, key string, body map[string]any) map[string]any {
	t.Helper()
	res := call(t, "POST", "/v1/agents", key, body)
	if res.Status != http.StatusCreated {
		t.Fatalf("create agent: %d %s", res.Status, res.Body)
	}
	return res.JSON(t)["agent"].(map[string]any)
}

// allowVoiceAgent does what the operator's scripts/admin voice-agent-allow
// does.
func allowVoiceAgent(t testing.TB, acct stacktest.Account, provider, agentID string) {
	t.Helper()
	if _, err := stack.App.Accounts.AllowVoiceAgent(context.Background(), acct.User.ID, provider, agentID); err != nil {
		t.Fatalf("allow voice agent: %v", err)
	}
}

// TestVoiceAgentsBelongToTheirTenant: an account may put behind its avatars
// only the LiveKit and ElevenLabs agents the operator enabled for it; local
// needs nothing. Another tenant's enabled agent is not enough.
func TestVoiceAgentsBelongToTheirTenant(t *testing.T) {
	skipShort(t)
	acct, other := newAccount(t, "pro"), newAccount(t, "pro")
	allowVoiceAgent(t, other, "livekit", "acme-concierge")
	allowVoiceAgent(t, other, "elevenlabs", "el_acme")
	body := func(provider, id string) map[string]any {
		return map[string]any{"name": "x", "avatar_id": "catalog/nasa/eileen-collins",
			"voice_agent": map[string]any{"provider": provider, "agent_id": id, "auth_method": "none"}}
	}
	for _, tc := range []struct {
		provider, id string
	}{{"livekit", "acme-concierge"}, {"elevenlabs", "el_acme"}} {
		t.Run("refused: "+tc.provider, func(t *testing.T) {
			res := call(t, "POST", "/v1/agents", acct.LiveKey, body(tc.provider, tc.id))
			assertStructuredError(t, res, 400, fmt.Sprintf("voice_agent %s %q is not enabled for this account", tc.provider, tc.id))
			plain := createAgent(t, acct.LiveKey, map[string]any{"name": "plain", "avatar_id": "catalog/nasa/eileen-collins"})
			res = call(t, "PUT", "/v1/agents/"+plain["agent_id"].(string), acct.LiveKey, map[string]any{"voice_agent": body(tc.provider, tc.id)["voice_agent"]})
			assertStructuredError(t, res, 400, fmt.Sprintf("voice_agent %s %q is not enabled for this account", tc.provider, tc.id))
			if res := call(t, "POST", "/v1/agents", other.LiveKey, body(tc.provider, tc.id)); res.Status != http.StatusCreated {
				t.Errorf("the account it is enabled for: got %d %s, want 201", res.Status, res.Body)
			}
		})
	}
	t.Run("local needs no permission", func(t *testing.T) {
		if res := call(t, "POST", "/v1/agents", acct.LiveKey, body("local", "demo")); res.Status != http.StatusCreated {
			t.Errorf("local: got %d %s, want 201", res.Status, res.Body)
		}
	})
	t.Run("enabled, then revoked", func(t *testing.T) {
		allowVoiceAgent(t, acct, "livekit", "mine")
		if res := call(t, "POST", "/v1/agents", acct.LiveKey, body("livekit", "mine")); res.Status != http.StatusCreated {
			t.Fatalf("after allow: got %d %s, want 201", res.Status, res.Body)
		}
		if _, err := stack.App.Accounts.RevokeVoiceAgent(context.Background(), acct.User.ID, "livekit", "mine"); err != nil {
			t.Fatal(err)
		}
		assertStructuredError(t, call(t, "POST", "/v1/agents", acct.LiveKey, body("livekit", "mine")), 400,
			`voice_agent livekit "mine" is not enabled for this account`)
	})
}

func TestAgents(t *testing.T) {
	skipShort(t)
	acct, other := newAccount(t, "pro"), newAccount(t, "pro")
	allowVoiceAgent(t, acct, "elevenlabs", "agent_123")
	avatarID, avatarNumber := uploadFace(t, acct.LiveKey)
	first := createAgent(t, acct.LiveKey, agentBody(avatarID))
	stack.Clock.Advance(time.Second)
	second := createAgent(t, acct.LiveKey, map[string]any{"name": "Catalog one", "avatar_id": "catalog/nasa/eileen-collins"})
	createAgent(t, other.LiveKey, map[string]any{"name": "Not yours", "avatar_id": "catalog/nasa/eileen-collins"})

	t.Run("primary form", func(t *testing.T) {
		if id, _ := first["agent_id"].(string); !strings.HasPrefix(id, "agnt_") {
			t.Errorf("agent_id: got %v, want agnt_...", first["agent_id"])
		}
		if url, _ := first["avatar_image_url"].(string); !strings.HasSuffix(url, ".webp") {
			t.Errorf("avatar_image_url: got %v, want the avatar's url", first["avatar_image_url"])
		}
		va := first["voice_agent"].(map[string]any)
		if va["provider"] != "elevenlabs" || va["agent_id"] != "agent_123" || va["auth_method"] != "none" {
			t.Errorf("voice_agent: got %v", va)
		}
		if _, err := time.Parse(time.RFC3339, first["created_at"].(string)); err != nil {
			t.Errorf("created_at: %v", err)
		}
	})
	t.Run("list is own, newest first", func(t *testing.T) {
		for _, p := range prefixes {
			list := call(t, "GET", p+"/agents", acct.LiveKey, nil).JSON(t)["agents"].([]any)
			if len(list) != 2 || dig(list[0], "agent_id") != second["agent_id"] || dig(list[1], "agent_id") != first["agent_id"] {
				t.Errorf("%s/agents: got %v, want [second, first]", p, list)
			}
		}
	})
	t.Run("get by either id", func(t *testing.T) {
		for _, id := range []string{first["agent_id"].(string), strconv.Itoa(int(first["id"].(float64)))} {
			res := call(t, "GET", "/v1/agents/"+id, acct.LiveKey, nil)
			if res.Status != 200 || dig(res.JSON(t), "agent", "name") != "Support" {
				t.Errorf("GET %s: %d %s", id, res.Status, res.Body)
			}
		}
		assertStructuredError(t, call(t, "GET", "/v1/agents/"+first["agent_id"].(string), other.LiveKey, nil), 404, "Agent not found")
		assertStructuredError(t, call(t, "GET", "/v1/agents/agnt_"+strings.Repeat("Z", 2000), acct.LiveKey, nil), 404, "Agent not found")
	})
	t.Run("duplicate", func(t *testing.T) {
		n := strconv.Itoa(int(first["id"].(float64)))
		res := call(t, "POST", "/api/v1/agents/"+n+"/duplicate", acct.LiveKey, nil)
		if res.Status != http.StatusCreated {
			t.Fatalf("duplicate: %d %s", res.Status, res.Body)
		}
		m := res.JSON(t)
		c := m["agent"].(map[string]any)
		if m["success"] != true || m["message"] == "" {
			t.Errorf("duplicate answer: %v", m)
		}
		if c["name"] != "Support (Copy)" || c["custom_greeting"] != "Hi there" || c["context"] != "You help with billing." ||
			c["language"] != "en" || c["status"] != "active" || c["avatar_id"] != float64(avatarNumber) {
			t.Errorf("second-form copy: got %v", c)
		}
		if _, ok := c["agent_id"].(float64); !ok || c["agent_id"] == first["id"] {
			t.Errorf("copy agent_id: got %v, want a new integer id", c["agent_id"])
		}
		full := dig(call(t, "GET", "/v1/agents/"+c["agent_public_id"].(string), acct.LiveKey, nil).JSON(t), "agent")
		if dig(full, "properties", "tone") != "warm" || len(dig(full, "memories").([]any)) != 1 ||
			len(dig(full, "knowledge_base").([]any)) != 1 || dig(full, "voice_agent", "agent_id") != "agent_123" {
			t.Errorf("copied settings: got %v", full)
		}
		assertStringError(t, call(t, "POST", "/api/v1/agents/"+n+"/duplicate", other.LiveKey, nil), 404, false, "Agent not found")
		assertStringError(t, call(t, "POST", "/api/v1/agents/99999999/duplicate", acct.LiveKey, nil), 404, false, "Agent not found")
	})
	t.Run("voice follows the avatar", func(t *testing.T) {
		call(t, "PUT", "/api/v1/avatars/"+strconv.Itoa(avatarNumber), acct.LiveKey, map[string]any{"voice_id": "fr"})
		for _, a := range call(t, "GET", "/v1/agents", acct.LiveKey, nil).JSON(t)["agents"].([]any) {
			if dig(a, "avatar_id") == avatarID && dig(a, "voice_id") != "fr" {
				t.Errorf("agent %v voice_id: got %v, want fr", dig(a, "name"), dig(a, "voice_id"))
			}
		}
	})
	t.Run("update and delete", func(t *testing.T) {
		id := second["agent_id"].(string)
		res := call(t, "PUT", "/v1/agents/"+id, acct.LiveKey, map[string]any{"name": "Renamed", "voice_agent": nil})
		if res.Status != 200 || dig(res.JSON(t), "agent", "name") != "Renamed" || dig(res.JSON(t), "agent", "voice_agent") != nil {
			t.Errorf("update: %d %s", res.Status, res.Body)
		}
		assertStructuredError(t, call(t, "PUT", "/v1/agents/"+id, acct.LiveKey, map[string]any{}), 400, "No fields to update")
		assertStructuredError(t, call(t, "PUT", "/v1/agents/"+id, other.LiveKey, map[string]any{"name": "x"}), 404, "Agent not found")
		if res := call(t, "DELETE", "/v1/agents/"+id, acct.LiveKey, nil); res.Status != 200 {
			t.Errorf("delete: %d %s", res.Status, res.Body)
		}
		assertStructuredError(t, call(t, "GET", "/v1/agents/"+id, acct.LiveKey, nil), 404, "Agent not found")
	})
	t.Run("create refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			body map[string]any
			msg  string
		}{
			{"no name", map[string]any{"avatar_id": avatarID}, "name is required"},
			{"no avatar", map[string]any{"name": "x"}, "avatar_id is required"},
			{"other tenant's avatar", map[string]any{"name": "x", "avatar_id": avatarID}, "Avatar not found"},
			{"unknown auth method", func() map[string]any {
				b := agentBody(avatarID)
				b["voice_agent"] = map[string]any{"provider": "elevenlabs", "agent_id": "a", "auth_method": "api_key"}
				return b
			}(), `Unsupported voice_agent.auth_method "api_key"`},
			{"signed url for a provider without one", func() map[string]any {
				b := agentBody(avatarID)
				b["voice_agent"] = map[string]any{"provider": "livekit", "agent_id": "a", "auth_method": "signed_url"}
				return b
			}(), `Unsupported voice_agent.auth_method "signed_url"`},
			{"unknown provider", func() map[string]any {
				b := agentBody(avatarID)
				b["voice_agent"] = map[string]any{"provider": "acme", "agent_id": "a", "auth_method": "none"}
				return b
			}(), `Unsupported voice_agent.provider "acme"`},
			{"deep properties", func() map[string]any {
				b := agentBody(avatarID)
				var v any = "leaf"
				for i := 0; i < 40; i++ {
					v = map[string]any{"x": v}
				}
				b["properties"] = v
				return b
			}(), "JSON is nested too deeply"},
			{"huge number", func() map[string]any {
				b := agentBody(avatarID)
				b["properties"] = map[string]any{"n": 1e300}
				return b
			}(), "A number is out of the storable range"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := acct.LiveKey
				if tc.name == "other tenant's avatar" {
					key = other.LiveKey
				}
				res := call(t, "POST", "/v1/agents", key, tc.body)
				if res.Status != 400 && res.Status != 404 {
					t.Errorf("status: got %d, want 400 or 404", res.Status)
				}
				if got := dig(res.JSON(t), "error", "message"); got != tc.msg {
					t.Errorf("message: got %v, want %q", got, tc.msg)
				}
			})
		}
	})
}

var prefixes = []string{"/v1", "/api/v1"}
