package httpapi

import (
	"net/http"

	"avatarsvc/shared/agents"
	"avatarsvc/shared/domain"
)

type voiceAgentView struct {
	Provider   string `json:"provider"`
	AgentID    string `json:"agent_id"`
	AuthMethod string `json:"auth_method"`
}

// agentView is the spec's primary form plus the agent's other settings.
type agentView struct {
	AgentID        string          `json:"agent_id"`
	ID             int64           `json:"id"`
	Name           string          `json:"name"`
	AvatarID       *string         `json:"avatar_id"`
	AvatarImageURL *string         `json:"avatar_image_url"`
	VoiceID        *string         `json:"voice_id"`
	Language       string          `json:"language"`
	CustomGreeting string          `json:"custom_greeting"`
	Context        string          `json:"context"`
	Properties     map[string]any  `json:"properties"`
	Memories       []any           `json:"memories"`
	KnowledgeBase  []any           `json:"knowledge_base"`
	VoiceAgent     *voiceAgentView `json:"voice_agent"`
	Status         string          `json:"status"`
	CreatedAt      string          `json:"created_at"`
	UpdatedAt      string          `json:"updated_at"`
}

func viewAgent(a agents.Agent) agentView {
	v := agentView{
		AgentID: a.ID, ID: a.Number, Name: a.Name, Language: a.Language, CustomGreeting: a.Greeting, Context: a.Context,
		Properties: a.Properties, Memories: a.Memories, KnowledgeBase: a.KnowledgeBase, Status: a.Status,
		CreatedAt: iso(a.CreatedAt), UpdatedAt: iso(a.UpdatedAt),
	}
	if v.Properties == nil {
		v.Properties = map[string]any{}
	}
	if v.Memories == nil {
		v.Memories = []any{}
	}
	if v.KnowledgeBase == nil {
		v.KnowledgeBase = []any{}
	}
	if a.Avatar != nil {
		v.AvatarID, v.AvatarImageURL = &a.Avatar.ID, &a.Avatar.URL
		if a.Avatar.VoiceID != "" {
			v.VoiceID = &a.Avatar.VoiceID
		}
	}
	if a.VoiceAgent.Provider != "" {
		v.VoiceAgent = &voiceAgentView{a.VoiceAgent.Provider, a.VoiceAgent.AgentID, a.VoiceAgent.AuthMethod}
	}
	return v
}

// agentSecondForm is the spec's second-form record (Duplicate Agent).
type agentSecondForm struct {
	AgentID        int64  `json:"agent_id"`
	AgentPublicID  string `json:"agent_public_id"`
	Name           string `json:"name"`
	AvatarID       *int64 `json:"avatar_id"`
	Language       string `json:"language"`
	CustomGreeting string `json:"custom_greeting"`
	Context        string `json:"context"`
	Status         string `json:"status"`
	CreatedAt      string `json:"created_at"`
}

func viewAgentSecondForm(a agents.Agent) agentSecondForm {
	v := agentSecondForm{
		AgentID: a.Number, AgentPublicID: a.ID, Name: a.Name, Language: a.Language, CustomGreeting: a.Greeting,
		Context: a.Context, Status: a.Status, CreatedAt: iso(a.CreatedAt),
	}
	if a.Avatar != nil {
		v.AvatarID = &a.Avatar.Number
	}
	return v
}

type agentRequest struct {
	Name           optional[string]          `json:"name"`
	AvatarID       optional[flexibleID]      `json:"avatar_id"`
	Language       optional[string]          `json:"language"`
	CustomGreeting optional[string]          `json:"custom_greeting"`
	Context        optional[string]          `json:"context"`
	Properties     optional[map[string]any]  `json:"properties"`
	Memories       optional[[]any]           `json:"memories"`
	KnowledgeBase  optional[[]any]           `json:"knowledge_base"`
	VoiceAgent     optional[*voiceAgentView] `json:"voice_agent"`
}

func (r agentRequest) any() bool {
	return r.Name.Set || r.AvatarID.Set || r.Language.Set || r.CustomGreeting.Set || r.Context.Set ||
		r.Properties.Set || r.Memories.Set || r.KnowledgeBase.Set || r.VoiceAgent.Set
}

func (r agentRequest) fields() agents.Fields {
	f := agents.Fields{
		Name: r.Name.ptr(), Language: r.Language.ptr(), Greeting: r.CustomGreeting.ptr(), Context: r.Context.ptr(),
	}
	if r.AvatarID.Set {
		s := string(r.AvatarID.Value)
		f.AvatarID = &s
	}
	if r.Properties.Set {
		f.Properties = r.Properties.Value
		if f.Properties == nil {
			f.Properties = map[string]any{}
		}
	}
	if r.Memories.Set {
		f.Memories = r.Memories.Value
		if f.Memories == nil {
			f.Memories = []any{}
		}
	}
	if r.KnowledgeBase.Set {
		f.KnowledgeBase = r.KnowledgeBase.Value
		if f.KnowledgeBase == nil {
			f.KnowledgeBase = []any{}
		}
	}
	if r.VoiceAgent.Set {
		var va *domain.VoiceAgent
		if v := r.VoiceAgent.Value; v != nil {
			va = &domain.VoiceAgent{Provider: v.Provider, AgentID: v.AgentID, AuthMethod: v.AuthMethod}
		}
		f.VoiceAgent = &va
	}
	return f
}

func handleCreateAgent(svc *agents.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decode[agentRequest](r)
		if err != nil {
			return err
		}
		if err := checkStorable(req.Properties.Value, req.Memories.Value, req.KnowledgeBase.Value); err != nil {
			return err
		}
		a, err := svc.Create(r.Context(), principal(r.Context()).UserID, req.fields())
		if err != nil {
			return err
		}
		encode(w, http.StatusCreated, map[string]any{"success": true, "agent": viewAgent(a)})
		return nil
	}
}

func handleGetAgent(svc *agents.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		a, err := svc.Get(r.Context(), principal(r.Context()).UserID, r.PathValue("agent_id"))
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]any{"success": true, "agent": viewAgent(a)})
		return nil
	}
}

func handleUpdateAgent(svc *agents.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decodeOptional[agentRequest](r)
		if err != nil {
			return err
		}
		if err := checkStorable(req.Properties.Value, req.Memories.Value, req.KnowledgeBase.Value); err != nil {
			return err
		}
		if !req.any() {
			return domain.Errorf(domain.Invalid, "No fields to update").
				WithSuggestion("Pass at least one of name, avatar_id, language, custom_greeting, context, properties, memories, knowledge_base, voice_agent")
		}
		f := req.fields()
		a, err := svc.Update(r.Context(), principal(r.Context()).UserID, r.PathValue("agent_id"), f)
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]any{"success": true, "agent": viewAgent(a)})
		return nil
	}
}

func handleDeleteAgent(svc *agents.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := svc.Delete(r.Context(), principal(r.Context()).UserID, r.PathValue("agent_id")); err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]bool{"success": true})
		return nil
	}
}

func handleDuplicateAgent(svc *agents.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		a, err := svc.Duplicate(r.Context(), principal(r.Context()).UserID, r.PathValue("id"))
		if err != nil {
			return err
		}
		encode(w, http.StatusCreated, map[string]any{
			"success": true, "agent": viewAgentSecondForm(a), "message": "Agent duplicated successfully",
		})
		return nil
	}
}
