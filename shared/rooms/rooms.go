// Package rooms creates LiveKit rooms for sessions the service hosts (links
// and rooms/initiate) and mints their join tokens, through LiveKit's room
// service (server-sdk-go) and access tokens (livekit/protocol).
package rooms

import (
	"context"
	"fmt"
	"time"

	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
)

// LiveKit is one LiveKit deployment (LIVEKIT_URL, LIVEKIT_API_KEY,
// LIVEKIT_API_SECRET).
type LiveKit struct {
	url         string
	key, secret string
	client      *lksdk.RoomServiceClient
}

// New returns the LiveKit platform, or nil when none is configured.
func New(url, key, secret string) *LiveKit {
	if url == "" || key == "" || secret == "" {
		return nil
	}
	return &LiveKit{url: url, key: key, secret: secret, client: lksdk.NewRoomServiceClient(url, key, secret)}
}

// URL is the address client SDKs connect to.
func (l *LiveKit) URL() string { return l.url }

// Room settings: an empty room closes soon after everyone left, and a room
// nobody joins closes after the renderer's own wait for a first viewer.
const (
	emptyTimeout     = 2 * time.Minute
	departureTimeout = 20 * time.Second
	maxParticipants  = 8
)

// Create makes a room called name.
func (l *LiveKit) Create(ctx context.Context, name string) error {
	_, err := l.client.CreateRoom(ctx, &livekit.CreateRoomRequest{
		Name: name, EmptyTimeout: uint32(emptyTimeout.Seconds()), DepartureTimeout: uint32(departureTimeout.Seconds()),
		MaxParticipants: maxParticipants,
	})
	if err != nil {
		return fmt.Errorf("livekit: create room %s: %w", name, err)
	}
	return nil
}

// Token mints a join token for identity in room, valid for ttl.
func (l *LiveKit) Token(room, identity, name string, ttl time.Duration) (string, error) {
	t := auth.NewAccessToken(l.key, l.secret).SetIdentity(identity).SetName(name).SetValidFor(ttl).
		SetVideoGrant(&auth.VideoGrant{RoomJoin: true, Room: room, CanPublish: ptr(true), CanSubscribe: ptr(true), CanPublishData: ptr(true)})
	jwt, err := t.ToJWT()
	if err != nil {
		return "", fmt.Errorf("livekit: token: %w", err)
	}
	return jwt, nil
}

func ptr[T any](v T) *T { return &v }

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
func (l *LiveKit) Host(ctx context.Context, prefix, id, userIdentity string, ttl time.Duration) (Hosted, error) {
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
