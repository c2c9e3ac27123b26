// Package avatars is the avatar service: upload with type sniffing,
// moderation and the plan's per-cycle quota, list, update, delete, and
// resolving an avatar id to the media a renderer fetches.
package avatars

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/store"
	"avatarsvc/shared/voices"
)

// Store is the persistence the service needs.
type Store interface {
	GetUser(ctx context.Context, id string) (domain.User, error)
	NumberAvatar(ctx context.Context) (int64, error)
	CreateAvatar(ctx context.Context, a domain.Avatar, q *store.AvatarQuota) error
	GetAvatar(ctx context.Context, userID, id string) (domain.Avatar, error)
	AvatarIDForNumber(ctx context.Context, n int64) (string, error)
	ListAvatars(ctx context.Context, userID string, page domain.Page) ([]domain.Avatar, string, error)
	UpdateAvatar(ctx context.Context, userID, id string, c store.AvatarChanges, now time.Time) (domain.Avatar, error)
	DeleteAvatar(ctx context.Context, a domain.Avatar) error
}

// MediaStore keeps uploaded files.
type MediaStore interface {
	Name() string
	Put(ctx context.Context, key string, data []byte, contentType string) error
	Delete(ctx context.Context, key string) error
}

// Moderator checks uploads (avatarimage.Moderation: the renderer's own
// decode and face checks). It is declared here, where it is used, so that
// avatarimage needs nothing from this service.
type Moderator interface {
	CheckImage(data []byte) error
	CheckVideo(ctx context.Context, data []byte) error
	VideoSupported() bool
}

// NoModerator stands in where moderation is on but this binary has no
// face detector linked: every check fails, so nothing is stored unchecked.
type NoModerator struct{}

var errNoModerator = errors.New("moderation is not available in this process")

func (NoModerator) CheckImage([]byte) error                  { return errNoModerator }
func (NoModerator) CheckVideo(context.Context, []byte) error { return errNoModerator }
func (NoModerator) VideoSupported() bool                     { return true }

// Service manages avatars.
type Service struct {
	store     Store
	media     MediaStore
	moderator Moderator // nil: moderation off
	baseURL   string    // public address of the media bucket's objects
	now       func() time.Time
	log       *slog.Logger
}

// New returns a Service. mediaBaseURL is where stored objects are served
// from (a CloudFront distribution in AWS); moderator nil turns moderation off.
func New(st Store, m MediaStore, mod Moderator, mediaBaseURL string, now func() time.Time, log *slog.Logger) *Service {
	return &Service{store: st, media: m, moderator: mod, baseURL: strings.TrimSuffix(mediaBaseURL, "/"), now: now, log: log}
}

// Limits on an upload's name and voice; its bytes are bounded by
// avatarimage.MaxImageBytes and MaxVideoBytes, as the renderer bounds them.
const (
	MaxNameLength = 200
	maxVoiceID    = 128
)

// Formats an upload may have, by sniffed content type, and the extension
// the stored object gets.
var formats = map[string]string{
	"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp",
	"video/mp4": "mp4", "video/webm": "webm",
}

// Upload is a file to store as an avatar.
type Upload struct {
	Name    string
	VoiceID string
	Data    []byte
}

// ErrModeration is the spec's 415 message; the reason goes in the suggestion.
const moderationMessage = "Uploaded image failed moderation checks"

// Upload sniffs the file's real type, counts it against the plan's avatars
// per cycle, moderates it, stores it and records the avatar. Nothing is
// left stored when any step fails.
func (s *Service) Upload(ctx context.Context, userID string, u Upload) (domain.Avatar, error) {
	if strings.TrimSpace(u.Name) == "" {
		return domain.Avatar{}, domain.Errorf(domain.Invalid, "name required")
	}
	if err := voices.Validate(u.VoiceID); err != nil {
		return domain.Avatar{}, err
	}
	if len(u.Name) > MaxNameLength || len(u.VoiceID) > maxVoiceID {
		return domain.Avatar{}, domain.Errorf(domain.Invalid, "name or voice_id is too long").
			WithSuggestion(fmt.Sprintf("name is limited to %d characters, voice_id to %d", MaxNameLength, maxVoiceID))
	}
	mediaType := sniff(u.Data)
	ext, ok := formats[mediaType]
	if !ok {
		return domain.Avatar{}, domain.Errorf(domain.Unacceptable, "Unsupported file type").
			WithSuggestion("Upload a PNG, JPG, GIF or WebP image, or an MP4 or WebM video (the file's content decides, not its name)")
	}
	video := strings.HasPrefix(mediaType, "video/")
	if (video && len(u.Data) > avatarimage.MaxVideoBytes) || (!video && len(u.Data) > avatarimage.MaxImageBytes) {
		return domain.Avatar{}, tooLarge()
	}

	user, err := s.store.GetUser(ctx, userID)
	if err != nil {
		return domain.Avatar{}, err
	}
	now := s.now().UTC()
	plan, period := user.EffectivePlan(now), user.CurrentPeriod(now)
	if err := quotaError(plan, user.AvatarsUsedIn(period)); err != nil {
		return domain.Avatar{}, err
	}
	if err := s.moderate(ctx, u.Data, video); err != nil {
		return domain.Avatar{}, err
	}

	n, err := s.store.NumberAvatar(ctx)
	if err != nil {
		return domain.Avatar{}, err
	}
	a := domain.Avatar{
		ID: domain.NewAvatarID(), Number: n, UserID: userID, Name: strings.TrimSpace(u.Name), VoiceID: u.VoiceID,
		MediaType: mediaType, CreatedAt: now, UpdatedAt: now,
	}
	a.StorageKey = "avatars/" + userID + "/" + a.ID + "." + ext
	a.URL = s.baseURL + "/" + a.StorageKey
	if err := s.media.Put(ctx, a.StorageKey, u.Data, mediaType); err != nil {
		return domain.Avatar{}, &domain.Error{Code: domain.Internal, Message: "Upload failed, please retry", Err: err}
	}
	q := &store.AvatarQuota{Period: period, SamePeriod: user.UsagePeriod == period.Key(), Limit: plan.AvatarLimit}
	if err := s.store.CreateAvatar(ctx, a, q); err != nil {
		s.removeObject(ctx, a.StorageKey)
		switch {
		case errors.Is(err, store.ErrAccountLimit):
			return domain.Avatar{}, quotaError(plan, max(plan.AvatarLimit, 0))
		case errors.Is(err, store.ErrSessionChanged):
			return domain.Avatar{}, domain.Errorf(domain.Unavailable, "The account changed concurrently, please retry")
		}
		return domain.Avatar{}, err
	}
	return a, nil
}

func tooLarge() error {
	return domain.Errorf(domain.TooLarge, "File is too large").
		WithSuggestion(fmt.Sprintf("Images are limited to %d MB and videos to %d MB", avatarimage.MaxImageBytes>>20, avatarimage.MaxVideoBytes>>20))
}

// quotaError refuses an upload the plan does not allow; nil when used is
// below the plan's avatars per cycle.
func quotaError(plan domain.Plan, used int) error {
	switch {
	case plan.AvatarLimit == 0:
		return domain.Errorf(domain.LimitExceeded, "Your plan does not include avatar creation").
			WithSuggestion(fmt.Sprintf("The %s plan includes no avatar uploads; upgrade to Explorer or above, or use a catalog avatar", plan.Name))
	case plan.AvatarLimit > 0 && used >= plan.AvatarLimit:
		return domain.Errorf(domain.LimitExceeded, "Avatar limit reached for this billing cycle").
			WithSuggestion(fmt.Sprintf("The %s plan allows %d avatars per cycle; the count resets with the next cycle", plan.Name, plan.AvatarLimit))
	}
	return nil
}

func (s *Service) moderate(ctx context.Context, data []byte, video bool) error {
	if s.moderator == nil {
		return nil
	}
	var err error
	switch {
	case s.moderator == Moderator(NoModerator{}):
		return domain.Errorf(domain.Internal, "Uploads cannot be checked by this function").
			WithSuggestion("The operator must deploy uploads through the avatars-upload function, which links the checks")
	case video && !s.moderator.VideoSupported():
		return domain.Errorf(domain.Internal, "Video uploads cannot be checked on this deployment").
			WithSuggestion("Upload an image, or ask the operator to install ffmpeg for the upload function")
	case video:
		err = s.moderator.CheckVideo(ctx, data)
	default:
		err = s.moderator.CheckImage(data)
	}
	if err == nil {
		return nil
	}
	s.log.InfoContext(ctx, "upload refused by moderation", "reason", err.Error())
	return &domain.Error{Code: domain.Unacceptable, Message: moderationMessage, Suggestion: capitalize(err.Error()), Err: err}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (s *Service) removeObject(ctx context.Context, key string) {
	if err := s.media.Delete(context.WithoutCancel(ctx), key); err != nil {
		s.log.ErrorContext(ctx, "delete uploaded object", "key", key, "err", err)
	}
}

// sniff names the file's real type from its first bytes.
func sniff(data []byte) string {
	t := http.DetectContentType(data)
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = t[:i]
	}
	return t
}

// Get returns an avatar the user may use, by either id form.
func (s *Service) Get(ctx context.Context, userID, ref string) (domain.Avatar, error) {
	id, n, err := domain.ParseAvatarRef(ref)
	if err != nil {
		return domain.Avatar{}, err
	}
	if id == "" {
		if id, err = s.store.AvatarIDForNumber(ctx, n); err != nil {
			return domain.Avatar{}, err
		}
	}
	return s.store.GetAvatar(ctx, userID, id)
}

// Source is where a renderer fetches the avatar's media.
func (s *Service) Source(a domain.Avatar) domain.AvatarSource {
	return domain.AvatarSource{Bucket: s.media.Name(), Key: a.StorageKey, MediaType: a.MediaType}
}

// List returns a page of the user's avatars, newest first.
func (s *Service) List(ctx context.Context, userID string, page domain.Page) ([]domain.Avatar, string, error) {
	return s.store.ListAvatars(ctx, userID, page)
}

// Changes is an Update request; nil fields stay as they are. A VoiceID
// pointing at "" removes the voice.
type Changes = store.AvatarChanges

// Update changes the user's own avatar (integer id form). Agents read their
// avatar's image and voice when they are used, so a change applies to every
// agent at once.
func (s *Service) Update(ctx context.Context, userID, ref string, c Changes) (domain.Avatar, error) {
	if c.Name == nil && c.URL == nil && c.VoiceID == nil && c.IsFavorite == nil {
		return domain.Avatar{}, domain.Errorf(domain.Invalid, "No fields to update").
			WithSuggestion("Pass at least one of name, url, voice_id, is_favorite")
	}
	if c.Name != nil && (strings.TrimSpace(*c.Name) == "" || len(*c.Name) > MaxNameLength) {
		return domain.Avatar{}, domain.Errorf(domain.Invalid, "name must be 1 to %d characters", MaxNameLength)
	}
	if c.URL != nil && !strings.HasPrefix(*c.URL, "https://") && !strings.HasPrefix(*c.URL, s.baseURL+"/") {
		return domain.Avatar{}, domain.Errorf(domain.Invalid, "url must be an https:// address")
	}
	if c.VoiceID != nil {
		if err := voices.Validate(*c.VoiceID); err != nil {
			return domain.Avatar{}, err
		}
	}
	if c.VoiceID != nil && len(*c.VoiceID) > maxVoiceID {
		return domain.Avatar{}, domain.Errorf(domain.Invalid, "voice_id is too long")
	}
	a, err := s.Get(ctx, userID, ref)
	if err != nil {
		return domain.Avatar{}, err
	}
	if a.UserID != userID { // catalog avatars are shared, not the caller's to change
		return domain.Avatar{}, domain.ErrAvatarNotFound
	}
	return s.store.UpdateAvatar(ctx, userID, a.ID, c, s.now().UTC())
}

// Delete removes the user's own avatar and its stored file.
func (s *Service) Delete(ctx context.Context, userID, ref string) error {
	a, err := s.Get(ctx, userID, ref)
	if err != nil {
		return err
	}
	if a.UserID != userID {
		return domain.Errorf(domain.Forbidden, "You do not have permission to delete this avatar").
			WithSuggestion("Catalog avatars are shared by every account and cannot be deleted")
	}
	if err := s.store.DeleteAvatar(ctx, a); err != nil {
		return err
	}
	if a.StorageKey != "" {
		s.removeObject(ctx, a.StorageKey)
	}
	return nil
}

// PutCatalog stores a catalog avatar (shared by every account) from an
// image file, once: an id already present is left as it is. Catalog images
// pass the same moderation as uploads.
func (s *Service) PutCatalog(ctx context.Context, id, name string, data []byte) (domain.Avatar, error) {
	if !strings.HasPrefix(id, domain.CatalogPrefix) {
		return domain.Avatar{}, fmt.Errorf("catalog id %q must start with %s", id, domain.CatalogPrefix)
	}
	if _, _, err := domain.ParseAvatarRef(id); err != nil {
		return domain.Avatar{}, fmt.Errorf("catalog id %q is not a valid path", id)
	}
	if a, err := s.store.GetAvatar(ctx, domain.CatalogOwner, id); err == nil {
		return a, nil
	}
	mediaType := sniff(data)
	ext, ok := formats[mediaType]
	if !ok || strings.HasPrefix(mediaType, "video/") {
		return domain.Avatar{}, fmt.Errorf("catalog %s: not an image (%s)", id, mediaType)
	}
	if s.moderator != nil {
		if err := s.moderator.CheckImage(data); err != nil {
			return domain.Avatar{}, fmt.Errorf("catalog %s: %w", id, err)
		}
	}
	n, err := s.store.NumberAvatar(ctx)
	if err != nil {
		return domain.Avatar{}, err
	}
	now := s.now().UTC()
	a := domain.Avatar{
		ID: id, Number: n, UserID: domain.CatalogOwner, Name: name, MediaType: mediaType,
		StorageKey: id + "." + ext, CreatedAt: now, UpdatedAt: now,
	}
	a.URL = s.baseURL + "/" + a.StorageKey
	if err := s.media.Put(ctx, a.StorageKey, data, mediaType); err != nil {
		return domain.Avatar{}, err
	}
	if err := s.store.CreateAvatar(ctx, a, nil); err != nil {
		return domain.Avatar{}, err
	}
	return a, nil
}

// SeedCatalog puts every image under dir (infra/catalog) into the catalog:
// dir/nasa/eileen-collins.png becomes catalog/nasa/eileen-collins.
func (s *Service) SeedCatalog(ctx context.Context, dir string) ([]domain.Avatar, error) {
	var out []domain.Avatar
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := filepath.Ext(path)
		if _, ok := map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true}[strings.ToLower(ext)]; !ok {
			return nil
		}
		rel, err := filepath.Rel(dir, strings.TrimSuffix(path, ext))
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		words := strings.Split(filepath.Base(rel), "-")
		for i, w := range words {
			words[i] = capitalize(w)
		}
		a, err := s.PutCatalog(ctx, domain.CatalogPrefix+filepath.ToSlash(rel), strings.Join(words, " "), data)
		if err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, err
}
