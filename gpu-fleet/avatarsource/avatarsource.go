// Package avatarsource loads one session's avatar for the renderer: the
// bytes from the media bucket (data URIs stored at creation) or from the
// caller's https URL, fetched through netguard so no redirect or DNS answer
// can aim the fetch at internal addresses; then a bounded decode and the
// face checks of gpu-fleet/avatar. Prepared avatars are cached by content,
// so a repeated avatar skips the face search (about 100 ms).
package avatarsource

import (
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/netguard"
)

// ObjectGetter reads media bucket objects (*s3.Client).
type ObjectGetter interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// Config bounds the loader. Zero values take the defaults.
type Config struct {
	S3     ObjectGetter
	Policy netguard.Policy
	// MaxBytes caps an avatar's size, checked while reading (50 MiB, the
	// upload limit for videos; images are then held to the upload's 10 MiB).
	MaxBytes int64
	// FFmpeg takes the still of a video avatar ("ffmpeg" on PATH when empty).
	FFmpeg string
	// ConnectTimeout bounds each dial; TotalTimeout the whole fetch (3 s, 10 s).
	ConnectTimeout, TotalTimeout time.Duration
	MaxRedirects                 int // 3
	// RootCAs replaces the system roots (tests); nil uses the system's.
	RootCAs      *x509.CertPool
	CacheEntries int // 64
}

// Loader loads avatars; safe for concurrent use.
type Loader struct {
	cfg    Config
	client *http.Client

	mu    sync.Mutex
	lru   *list.List // of *cacheEntry, most recent first
	index map[cacheKey]*list.Element
}

type cacheKey struct {
	sum  [32]byte
	w, h int
}

type cacheEntry struct {
	key      cacheKey
	prepared *avatarimage.Prepared
}

// New returns a Loader.
func New(cfg Config) *Loader {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 50 << 20
	}
	if cfg.FFmpeg == "" {
		cfg.FFmpeg = "ffmpeg"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 3 * time.Second
	}
	if cfg.TotalTimeout <= 0 {
		cfg.TotalTimeout = 10 * time.Second
	}
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = 3
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = 64
	}
	transport := &http.Transport{
		// Every connection, including each redirect hop's, is dialled
		// through the guard; no proxy, which would dial on our behalf.
		DialContext:           cfg.Policy.Dialer(cfg.ConnectTimeout).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.TotalTimeout,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
	}
	l := &Loader{cfg: cfg, lru: list.New(), index: map[cacheKey]*list.Element{}}
	l.client = &http.Client{
		Transport: transport,
		Timeout:   cfg.TotalTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > cfg.MaxRedirects {
				return fmt.Errorf("%w: more than %d", errRedirects, cfg.MaxRedirects)
			}
			if req.URL.Scheme != "https" {
				return fmt.Errorf("%w: redirect to %s", errNotHTTPS, req.URL.Scheme)
			}
			return nil
		},
	}
	return l
}

var (
	errFetch     = errors.New("fetch failed")
	errTooLarge  = errors.New("avatar larger than the limit")
	errNotHTTPS  = errors.New("not an https URL")
	errRedirects = errors.New("too many redirects")
)

// statusError is a non-2xx answer.
type statusError struct {
	status int
	host   string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d from %s", e.status, e.host) }

// Load fetches src, decodes it and prepares it at width x height.
func (l *Loader) Load(ctx context.Context, src domain.AvatarSource, width, height int) (*avatarimage.Prepared, error) {
	data, err := l.fetch(ctx, src)
	if err != nil {
		return nil, err
	}
	key := cacheKey{sum: sha256.Sum256(data), w: width, h: height}
	if p := l.cached(key); p != nil {
		return p, nil
	}
	// The upload's checks, whatever the avatar's origin (a URL given to
	// Create Session included): its bounds, a video's still from ffmpeg's
	// box, then Prepare's face checks.
	img, err := avatarimage.Still(ctx, l.cfg.FFmpeg, data)
	if err != nil {
		return nil, err
	}
	p, err := avatarimage.Prepare(img, width, height)
	if err != nil {
		return nil, err
	}
	l.remember(key, p)
	return p, nil
}

func (l *Loader) fetch(ctx context.Context, src domain.AvatarSource) ([]byte, error) {
	switch {
	case src.Key != "":
		if l.cfg.S3 == nil {
			return nil, fmt.Errorf("%w: no media bucket configured", errFetch)
		}
		out, err := l.cfg.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(src.Bucket), Key: aws.String(src.Key)})
		if err != nil {
			return nil, fmt.Errorf("%w: media object %s: %v", errFetch, src.Key, err)
		}
		defer out.Body.Close()
		return l.readCapped(out.Body, aws.ToInt64(out.ContentLength))
	case src.URL != "":
		return l.fetchURL(ctx, src.URL)
	}
	return nil, fmt.Errorf("%w: the session has no avatar", errFetch)
}

func (l *Loader) fetchURL(ctx context.Context, raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, errNotHTTPS
	}
	if !l.cfg.Policy.HostAllowed(u.Hostname()) {
		return nil, fmt.Errorf("%w: %w: %s", errFetch, netguard.ErrHostNotAllowed, u.Hostname())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errFetch, err)
	}
	req.Header.Set("Accept", "image/png, image/jpeg, image/gif, image/webp")
	res, err := l.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errFetch, err)
	}
	defer res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return nil, &statusError{status: res.StatusCode, host: u.Hostname()}
	}
	return l.readCapped(res.Body, res.ContentLength)
}

// readCapped reads at most MaxBytes, refusing early when the declared
// length is already over, and stops reading as soon as the cap is passed.
func (l *Loader) readCapped(r io.Reader, declared int64) ([]byte, error) {
	if declared > l.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: declared %d bytes", errTooLarge, declared)
	}
	data, err := io.ReadAll(io.LimitReader(r, l.cfg.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading: %v", errFetch, err)
	}
	if int64(len(data)) > l.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: over %d bytes", errTooLarge, l.cfg.MaxBytes)
	}
	return data, nil
}

func (l *Loader) cached(k cacheKey) *avatarimage.Prepared {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.index[k]; ok {
		l.lru.MoveToFront(e)
		return e.Value.(*cacheEntry).prepared
	}
	return nil
}

func (l *Loader) remember(k cacheKey, p *avatarimage.Prepared) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.index[k]; ok {
		return
	}
	l.index[k] = l.lru.PushFront(&cacheEntry{key: k, prepared: p})
	for l.lru.Len() > l.cfg.CacheEntries {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.index, old.Value.(*cacheEntry).key)
	}
}

// EndReason is the session end reason for a Load failure, shown in Get
// Session: "avatar_unavailable: <why>" when the bytes could not be had,
// "avatar_rejected: <why>" when the image is not usable.
func EndReason(err error) string {
	switch {
	case errors.Is(err, avatarimage.ErrNoFace):
		return "avatar_rejected: no face found"
	case errors.Is(err, avatarimage.ErrManyFaces):
		return "avatar_rejected: more than one face"
	case errors.Is(err, avatarimage.ErrFaceTooSmall):
		return "avatar_rejected: face too small"
	case errors.Is(err, errTooLarge), errors.Is(err, avatarimage.ErrTooLarge):
		return "avatar_rejected: image too large"
	case errors.Is(err, avatarimage.ErrUnsupportedFormat), errors.Is(err, avatarimage.ErrCorruptImage):
		return "avatar_rejected: unreadable image"
	case errors.Is(err, avatarimage.ErrNotVideo):
		return "avatar_rejected: unreadable video"
	case errors.Is(err, avatarimage.ErrVideoUnsupported):
		return "avatar_rejected: video avatars need ffmpeg on the renderer host"
	case errors.Is(err, netguard.ErrAddressNotAllowed):
		return "avatar_unavailable: address not allowed"
	case errors.Is(err, netguard.ErrHostNotAllowed):
		return "avatar_unavailable: host not allowed"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "avatar_unavailable: timed out"
	case errors.Is(err, errNotHTTPS):
		return "avatar_unavailable: not an https URL"
	case errors.Is(err, errRedirects):
		return "avatar_unavailable: too many redirects"
	case errors.Is(err, errFetch):
		return "avatar_unavailable: could not fetch the image"
	}
	var se *statusError
	if errors.As(err, &se) {
		return fmt.Sprintf("avatar_unavailable: HTTP %d", se.status)
	}
	return "avatar_unavailable: could not load the image"
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
