package httpapi

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/links"
)

// Upload bounds: the whole multipart body, its part count, and each text
// field.
const (
	maxUploadBody  = avatarimage.MaxVideoBytes + 1<<20
	maxUploadParts = 16
	maxFieldBytes  = 1 << 10
)

// avatarView is an avatar as responses show it: the spec's second-form
// record plus the primary id and what else a client needs.
type avatarView struct {
	ID           int64   `json:"id"`
	AvatarID     string  `json:"avatar_id"`
	Name         string  `json:"name"`
	URL          string  `json:"url"`
	VoiceID      *string `json:"voice_id"`
	CloudinaryID string  `json:"cloudinary_id"`
	MediaType    string  `json:"media_type"`
	IsFavorite   bool    `json:"is_favorite"`
	CreatedAt    string  `json:"created_at"`
	UpdatedAt    string  `json:"updated_at"`
}

func viewAvatar(a domain.Avatar) avatarView {
	v := avatarView{
		ID: a.Number, AvatarID: a.ID, Name: a.Name, URL: a.URL, CloudinaryID: a.StorageKey, MediaType: a.MediaType,
		IsFavorite: a.IsFavorite, CreatedAt: iso(a.CreatedAt), UpdatedAt: iso(a.UpdatedAt),
	}
	if a.VoiceID != "" {
		v.VoiceID = &a.VoiceID
	}
	return v
}

func handleUploadAvatar(svc *avatars.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		up, err := readUpload(r)
		if err != nil {
			return err
		}
		a, err := svc.Upload(r.Context(), principal(r.Context()).UserID, up)
		if err != nil {
			return err
		}
		encode(w, http.StatusCreated, viewAvatar(a))
		return nil
	}
}

// readUpload reads the multipart form as a stream: the file part up to the
// video size bound (checked while reading), the text fields up to 1 KB
// each, and at most maxUploadParts parts.
func readUpload(r *http.Request) (avatars.Upload, error) {
	var up avatars.Upload
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return up, domain.Errorf(domain.Invalid, "No file uploaded").
			WithSuggestion("Send multipart/form-data with a file part named file and a name field")
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return up, domain.Errorf(domain.Invalid, "No file uploaded").WithSuggestion("The multipart body could not be read")
	}
	gotFile, gotName := false, false
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return up, bodyError(err, "The multipart body is malformed")
		}
		if parts >= maxUploadParts {
			return up, domain.Errorf(domain.Invalid, "Too many form parts").
				WithSuggestion("Send only file, name and voice_id")
		}
		switch p.FormName() {
		case "file":
			if gotFile {
				return up, domain.Errorf(domain.Invalid, "Only one file may be uploaded")
			}
			if up.Data, err = io.ReadAll(io.LimitReader(p, avatarimage.MaxVideoBytes+1)); err != nil {
				return up, bodyError(err, "The file could not be read")
			}
			if len(up.Data) > avatarimage.MaxVideoBytes {
				return up, domain.Errorf(domain.TooLarge, "File is too large").
					WithSuggestion("Images are limited to 10 MB and videos to 50 MB")
			}
			gotFile = len(up.Data) > 0
		case "name":
			up.Name, err = readField(p)
			gotName = err == nil
		case "voice_id":
			up.VoiceID, err = readField(p)
		default:
			_, err = io.Copy(io.Discard, io.LimitReader(p, maxFieldBytes))
		}
		if err != nil {
			return up, err
		}
	}
	if !gotFile {
		return up, domain.Errorf(domain.Invalid, "No file uploaded").WithSuggestion("Send the image or video in a part named file")
	}
	if !gotName || strings.TrimSpace(up.Name) == "" {
		return up, domain.Errorf(domain.Invalid, "name required")
	}
	return up, nil
}

func readField(p *multipart.Part) (string, error) {
	b, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
	if err != nil {
		return "", bodyError(err, "A form field could not be read")
	}
	if len(b) > maxFieldBytes {
		return "", domain.Errorf(domain.Invalid, "Form field %s is too long", p.FormName())
	}
	return string(b), nil
}

func bodyError(err error, msg string) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return domain.Errorf(domain.TooLarge, "File is too large").
			WithSuggestion("Images are limited to 10 MB and videos to 50 MB")
	}
	return domain.Errorf(domain.Invalid, "%s", msg)
}

func handleUpdateAvatar(svc *avatars.Service) handlerFunc {
	type request struct {
		Name       optional[string] `json:"name"`
		URL        optional[string] `json:"url"`
		VoiceID    optional[string] `json:"voice_id"`
		IsFavorite optional[bool]   `json:"is_favorite"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decodeOptional[request](r)
		if err != nil {
			return err
		}
		c := avatars.Changes{Name: req.Name.ptr(), URL: req.URL.ptr(), VoiceID: req.VoiceID.ptr(), IsFavorite: req.IsFavorite.ptr()}
		if req.VoiceID.Set && req.VoiceID.Null {
			empty := ""
			c.VoiceID = &empty
		}
		if _, err := svc.Update(r.Context(), principal(r.Context()).UserID, r.PathValue("id"), c); err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]bool{"success": true})
		return nil
	}
}

// decodeOptional decodes a partial-update body; an empty body is an empty
// update (which the services answer with "No fields to update").
func decodeOptional[T any](r *http.Request) (T, error) {
	v, err := decode[T](r)
	if domain.ErrorCode(err) == domain.Invalid {
		if msg, _ := domain.ErrorMessage(err); msg == "Request body is required" {
			var zero T
			return zero, nil
		}
	}
	return v, err
}

func handleDeleteAvatar(svc *avatars.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := svc.Delete(r.Context(), principal(r.Context()).UserID, r.PathValue("id")); err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]bool{"success": true})
		return nil
	}
}

func handlePreviewAvatar(svc *links.Service) handlerFunc {
	type request struct {
		AvatarID string `json:"avatar_id"`
	}
	type response struct {
		Success   bool   `json:"success"`
		URL       string `json:"url"`
		ExpiresAt string `json:"expires_at"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decodeOptional[request](r)
		if err != nil {
			return err
		}
		url, expires, err := svc.Preview(r.Context(), principal(r.Context()).UserID, req.AvatarID)
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, response{Success: true, URL: url, ExpiresAt: iso(expires)})
		return nil
	}
}
