package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"avatarsvc/gpu-fleet/conversation"
	"avatarsvc/gpu-fleet/elevenlabs"
	"avatarsvc/shared/domain"
)

// SecretReader reads one secret's string (*secretsmanager.Client).
type SecretReader interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// ElevenLabsAgents connects sessions to ElevenLabs Conversational AI
// agents (the elevenlabs provider). Public agents (auth_method none) need
// no secret; private ones (signed_url) get a signed conversation URL made
// with the operator's ElevenLabs API key, read from AWS Secrets Manager
// (ELEVENLABS_API_KEY_SECRET) when first needed. The service never stores
// customers' keys.
//
// Built from ElevenLabs' published protocol (gpu-fleet/elevenlabs); it has
// never spoken to the real service from the development environment.
type ElevenLabsAgents struct {
	BaseURL  string // ELEVENLABS_BASE_URL; elevenlabs.DefaultBaseURL when empty
	SecretID string // ELEVENLABS_API_KEY_SECRET; empty: signed_url agents are refused
	Secrets  SecretReader
	Log      *slog.Logger

	mu  sync.Mutex
	key string
}

// Dial opens the conversation for va.
func (e *ElevenLabsAgents) Dial(ctx context.Context, va domain.VoiceAgent) (conversation.Remote, error) {
	cfg := elevenlabs.Config{AgentID: va.AgentID, BaseURL: e.BaseURL, Logger: e.Log}
	if va.AuthMethod == domain.AuthSignedURL {
		key, err := e.apiKey(ctx)
		if err != nil {
			return nil, err
		}
		cfg.APIKey = key
	}
	return elevenlabs.Dial(ctx, cfg)
}

func (e *ElevenLabsAgents) apiKey(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.key != "" {
		return e.key, nil
	}
	if e.SecretID == "" || e.Secrets == nil {
		return "", errors.New("signed_url agents need the operator's ElevenLabs key: set ELEVENLABS_API_KEY_SECRET on the renderer")
	}
	out, err := e.Secrets.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(e.SecretID)})
	if err != nil {
		return "", fmt.Errorf("read the ElevenLabs key from Secrets Manager: %w", err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return "", errors.New("the ElevenLabs key secret is empty")
	}
	e.key = *out.SecretString
	return e.key, nil
}
