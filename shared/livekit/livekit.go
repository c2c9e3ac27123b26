// Package livekit creates LiveKit rooms for sessions the service hosts (links
// and rooms/initiate), mints their join tokens, dispatches voice agents
// into them and verifies LiveKit's webhooks.
//
// It speaks LiveKit's documented wire formats directly: the RoomService and
// AgentDispatchService twirp endpoints (JSON over HTTP) and HS256 JWTs signed with the API
// secret (go-jose). LiveKit's Go packages (server-sdk-go, and protocol's
// auth and webhook, which import its utils) pull in pion's WebRTC stack,
// about 25 MB in every Lambda binary; the tests check these tokens and
// signatures against a real livekit-server instead.
package livekit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"avatarsvc/shared/domain"

	"github.com/go-jose/go-jose/v3"
	"github.com/go-jose/go-jose/v3/jwt"
)

// Client is one LiveKit deployment (LIVEKIT_URL, LIVEKIT_API_KEY,
// LIVEKIT_API_SECRET).
type Client struct {
	url         string // what client SDKs dial (ws:// or wss://)
	api         string // the same host over http(s), for the room service
	key, secret string
	client      *http.Client
}

// New returns the LiveKit platform, or nil when none is configured.
func New(url, key, secret string) *Client {
	if url == "" || key == "" || secret == "" {
		return nil
	}
	api := strings.Replace(strings.Replace(url, "wss://", "https://", 1), "ws://", "http://", 1)
	return &Client{url: url, api: strings.TrimSuffix(api, "/"), key: key, secret: secret,
		client: &http.Client{Timeout: 10 * time.Second}}
}

// URL is the address client SDKs connect to.
func (l *Client) URL() string { return l.url }

// Room settings: an empty room closes soon after everyone left.
const (
	emptyTimeout     = 2 * time.Minute
	departureTimeout = 20 * time.Second
	maxParticipants  = 8
)

// videoGrant is LiveKit's "video" claim.
type videoGrant struct {
	RoomCreate     bool   `json:"roomCreate,omitempty"`
	RoomAdmin      bool   `json:"roomAdmin,omitempty"`
	RoomJoin       bool   `json:"roomJoin,omitempty"`
	Room           string `json:"room,omitempty"`
	CanPublish     *bool  `json:"canPublish,omitempty"`
	CanSubscribe   *bool  `json:"canSubscribe,omitempty"`
	CanPublishData *bool  `json:"canPublishData,omitempty"`
}

type claims struct {
	jwt.Claims
	Name  string      `json:"name,omitempty"`
	Video *videoGrant `json:"video,omitempty"`
	// Kind is the participant kind ("agent"; empty is a standard
	// participant) and Attributes its initial attributes, as LiveKit's
	// ClaimGrants spell them.
	Kind       string            `json:"kind,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

func (l *Client) sign(identity, name string, ttl time.Duration, grant videoGrant) (string, error) {
	return l.signClaims(identity, ttl, claims{Name: name, Video: &grant})
}

// signClaims signs c for identity, valid from now for ttl.
func (l *Client) signClaims(identity string, ttl time.Duration, c claims) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte(l.secret)},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	now := time.Now()
	c.Claims = jwt.Claims{Issuer: l.key, Subject: identity, ID: identity, NotBefore: jwt.NewNumericDate(now),
		Expiry: jwt.NewNumericDate(now.Add(ttl))}
	return jwt.Signed(signer).Claims(c).CompactSerialize()
}

// Create makes a room called name through the room service.
func (l *Client) Create(ctx context.Context, name string) error {
	return l.twirp(ctx, "RoomService/CreateRoom", videoGrant{RoomCreate: true}, map[string]any{
		"name": name, "empty_timeout": int(emptyTimeout.Seconds()),
		"departure_timeout": int(departureTimeout.Seconds()), "max_participants": maxParticipants,
	}, nil)
}

// DispatchAgent asks LiveKit to send ag's LiveKit voice agent (its
// voice_agent.agent_id is the worker's registered agent_name) into room,
// with job metadata naming the avatar participant it should drive
// (agent dispatch API).
func (l *Client) DispatchAgent(ctx context.Context, room, sessionID string, ag domain.Agent) error {
	md, err := json.Marshal(ag.Job(sessionID, AvatarIdentity))
	if err != nil {
		return err
	}
	return l.twirp(ctx, "AgentDispatchService/CreateDispatch", videoGrant{RoomAdmin: true, Room: room},
		map[string]any{"room": room, "agent_name": ag.VoiceAgent.AgentID, "metadata": string(md)}, nil)
}

// EndedKey is the room metadata key that says the room's session has
// ended: {"session_ended": "<reason code>"}. The link page reads it to tell
// a visitor who is still waiting for the avatar why it will not come.
const EndedKey = "session_ended"

// MarkEnded writes on room's metadata that its session ended, with the
// reason code only (PublicEndReason): everyone in the room can read it.
func (l *Client) MarkEnded(ctx context.Context, room, reason string) error {
	md, err := json.Marshal(map[string]string{EndedKey: PublicEndReason(reason)})
	if err != nil {
		return err
	}
	return l.twirp(ctx, "RoomService/UpdateRoomMetadata", videoGrant{RoomAdmin: true, Room: room},
		map[string]any{"room": room, "metadata": string(md)}, nil)
}

// PublicEndReason is the part of an end reason a visitor may see: its code
// ("avatar_unavailable" of "avatar_unavailable: HTTP 404"); the detail
// stays with the owner (Get Session). Anything else reads "ended".
func PublicEndReason(reason string) string {
	code, _, _ := strings.Cut(reason, ":")
	code = strings.TrimSpace(code)
	if code == "" || len(code) > 40 {
		return "ended"
	}
	for _, r := range code {
		if (r < 'a' || r > 'z') && r != '_' {
			return "ended"
		}
	}
	return code
}

// Dispatched is one agent dispatch of a room.
type Dispatched struct {
	AgentName string `json:"agent_name"`
	Metadata  string `json:"metadata"`
}

// Dispatches lists the agent dispatches of room.
func (l *Client) Dispatches(ctx context.Context, room string) ([]Dispatched, error) {
	var out struct {
		AgentDispatches []Dispatched `json:"agent_dispatches"`
	}
	err := l.twirp(ctx, "AgentDispatchService/ListDispatch", videoGrant{RoomAdmin: true, Room: room},
		map[string]any{"room": room}, &out)
	return out.AgentDispatches, err
}

// twirp calls one method of LiveKit's server API (twirp, JSON) with a
// short-lived token carrying grant.
func (l *Client) twirp(ctx context.Context, method string, grant videoGrant, in, out any) error {
	token, err := l.sign("", "", time.Minute, grant)
	if err != nil {
		return fmt.Errorf("livekit: token: %w", err)
	}
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, "POST", l.api+"/twirp/livekit."+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := l.client.Do(req)
	if err != nil {
		return fmt.Errorf("livekit: %s: %w", method, err)
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("livekit: %s: HTTP %d: %s", method, res.StatusCode, msg)
	}
	if out != nil {
		if err := json.Unmarshal(msg, out); err != nil {
			return fmt.Errorf("livekit: %s: %w", method, err)
		}
	}
	return nil
}

// Token mints a join token for identity in room, valid for ttl: it may
// publish (camera, microphone, data) and subscribe.
func (l *Client) Token(room, identity, name string, ttl time.Duration) (string, error) {
	yes := true
	return l.sign(identity, name, ttl, videoGrant{RoomJoin: true, Room: room, CanPublish: &yes, CanSubscribe: &yes, CanPublishData: &yes})
}

// JoinToken mints the same kind of token for a room the API did not make,
// signed with key and secret: the dev tools (admin room-token, benches)
// and tests use it.
func JoinToken(key, secret, room, identity string, ttl time.Duration) (string, error) {
	return (&Client{key: key, secret: secret}).Token(room, identity, identity, ttl)
}

// AgentToken mints a join token of participant kind agent, as LiveKit's
// dispatch gives a voice agent and as a voice agent mints for its avatar;
// attrs become the participant's attributes (for an avatar,
// lk.publish_on_behalf). Dev tools and tests use it to stand in for a
// customer's voice agent.
func AgentToken(key, secret, room, identity string, attrs map[string]string, ttl time.Duration) (string, error) {
	yes := true
	return (&Client{key: key, secret: secret}).signClaims(identity, ttl, claims{
		Name:       identity,
		Video:      &videoGrant{RoomJoin: true, Room: room, CanPublish: &yes, CanSubscribe: &yes, CanPublishData: &yes},
		Kind:       "agent",
		Attributes: attrs,
	})
}

// Identities in service-made rooms: the renderer joins as AvatarIdentity
// (gpu-fleet/room uses the same constant).
const (
	AvatarIdentity = "avatar-renderer"
	avatarName     = "Avatar"
)

// Hosted is a room made for a session: the renderer's token stays on the
// server; the end user's is returned to the caller.
type Hosted struct {
	Name          string
	URL           string
	RendererToken string
	UserToken     string
	UserIdentity  string
}

// Host creates a uniquely named room (prefix + id) and both tokens.
func (l *Client) Host(ctx context.Context, prefix, id, userIdentity string, ttl time.Duration) (Hosted, error) {
	name := prefix + id
	if err := l.Create(ctx, name); err != nil {
		return Hosted{}, err
	}
	renderer, err := l.Token(name, AvatarIdentity, avatarName, ttl)
	if err != nil {
		return Hosted{}, err
	}
	user, err := l.Token(name, userIdentity, userIdentity, ttl)
	if err != nil {
		return Hosted{}, err
	}
	return Hosted{Name: name, URL: l.url, RendererToken: renderer, UserToken: user, UserIdentity: userIdentity}, nil
}

// Event is the part of a LiveKit webhook the service acts on.
type Event struct {
	Event string `json:"event"`
	Room  *struct {
		Name string `json:"name"`
	} `json:"room"`
	Participant *struct {
		Identity string `json:"identity"`
		// Kind is the participant kind's protobuf name ("AGENT" for voice
		// agents); absent for standard participants (the zero value).
		Kind string `json:"kind"`
	} `json:"participant"`
}

// IsPerson reports whether the event's participant is a person: not our
// avatar renderer and not a voice agent.
func (e Event) IsPerson() bool {
	p := e.Participant
	return p != nil && p.Identity != AvatarIdentity && p.Kind != "AGENT" && p.Kind != "EGRESS" && p.Kind != "INGRESS"
}

// ErrBadSignature answers a webhook that LiveKit did not sign.
var ErrBadSignature = errors.New("livekit: webhook signature does not verify")

// maxWebhookBytes bounds a webhook body (LiveKit's are a few KB).
const maxWebhookBytes = 1 << 20

// ReceiveWebhook verifies a webhook as LiveKit signs it: the Authorization
// header is a JWT signed with the API secret, issued by the API key, whose
// sha256 claim is the base64 SHA-256 of the body.
func (l *Client) ReceiveWebhook(r *http.Request) (Event, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBytes))
	if err != nil {
		return Event{}, err
	}
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	tok, err := jwt.ParseSigned(auth)
	if err != nil {
		return Event{}, ErrBadSignature
	}
	var c struct {
		jwt.Claims
		SHA256 string `json:"sha256"`
	}
	if err := tok.Claims([]byte(l.secret), &c); err != nil || len(tok.Headers) != 1 || tok.Headers[0].Algorithm != string(jose.HS256) {
		return Event{}, ErrBadSignature
	}
	if err := c.Claims.ValidateWithLeeway(jwt.Expected{Issuer: l.key, Time: time.Now()}, time.Minute); err != nil {
		return Event{}, ErrBadSignature
	}
	sum := sha256.Sum256(body)
	if c.SHA256 == "" || c.SHA256 != base64.StdEncoding.EncodeToString(sum[:]) {
		return Event{}, ErrBadSignature
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return Event{}, fmt.Errorf("livekit: webhook body: %w", err)
	}
	return ev, nil
}
