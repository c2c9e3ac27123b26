package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	_ "image/png"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"avatarsvc/gpu-fleet/testfiles"
)

// part is one multipart form part.
type part struct {
	field, filename, contentType string
	data                         []byte
}

func multipartBody(t testing.TB, parts ...part) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		var pw io.Writer
		var err error
		if p.filename != "" {
			h := make(map[string][]string)
			h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name=%q; filename=%q`, p.field, p.filename)}
			h["Content-Type"] = []string{p.contentType}
			pw, err = w.CreatePart(h)
		} else {
			pw, err = w.CreateFormField(p.field)
		}
		if err != nil {
			t.Fatal(err)
		}
		pw.Write(p.data)
	}
	w.Close()
	return w.FormDataContentType(), buf.Bytes()
}

func upload(t testing.TB, prefix, key string, parts ...part) response {
	t.Helper()
	ct, body := multipartBody(t, parts...)
	req, err := http.NewRequest("POST", stack.Server.URL+prefix+"/avatars/upload", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("x-api-key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := response{Status: res.StatusCode, Header: res.Header, Body: b}
	checkAgainstSpec(t, "POST", prefix+"/avatars/upload", out)
	return out
}

func fileParts(name string, data []byte, filename, ct string) []part {
	return []part{{field: "name", data: []byte(name)}, {field: "file", filename: filename, contentType: ct, data: data}}
}

// faceImages is the face photo in every image format uploads accept.
func faceImages(t testing.TB) map[string][]byte {
	t.Helper()
	png := testfiles.Read(t, testfiles.FacePNG)
	img, _, err := image.Decode(bytes.NewReader(png))
	if err != nil {
		t.Fatal(err)
	}
	var jpg, gf bytes.Buffer
	if err := jpeg.Encode(&jpg, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	if err := gif.Encode(&gf, img, nil); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"image/png": png, "image/jpeg": jpg.Bytes(), "image/gif": gf.Bytes(),
		"image/webp": testfiles.Read(t, testfiles.FaceWebP),
		"video/mp4":  testfiles.Read(t, testfiles.FaceMP4), "video/webm": testfiles.Read(t, testfiles.FaceWebM),
	}
}

// objectsUnder lists the media bucket's keys under prefix.
func objectsUnder(t testing.TB, prefix string) []string {
	t.Helper()
	out, err := stack.App.S3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{
		Bucket: aws.String(stack.App.Config.MediaBucket), Prefix: aws.String(prefix),
	})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, *o.Key)
	}
	return keys
}

func TestUploadEveryFormat(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	for mediaType, data := range faceImages(t) {
		t.Run(mediaType, func(t *testing.T) {
			prefix := "/api/v1"
			if strings.HasPrefix(mediaType, "video/") {
				prefix = "/v1"
			}
			res := upload(t, prefix, acct.LiveKey, fileParts("Eileen "+mediaType, data, "upload.bin", "application/octet-stream")...)
			if res.Status != http.StatusCreated {
				t.Fatalf("status: got %d, want 201 (%s)", res.Status, res.Body)
			}
			m := res.JSON(t)
			if _, ok := m["id"].(float64); !ok {
				t.Errorf("id: got %v, want an integer", m["id"])
			}
			if m["name"] != "Eileen "+mediaType || m["voice_id"] != nil || m["media_type"] != mediaType {
				t.Errorf("name, voice_id, media_type: got %v, %v, %v", m["name"], m["voice_id"], m["media_type"])
			}
			key, _ := m["cloudinary_id"].(string)
			if !strings.HasPrefix(key, "avatars/"+acct.User.ID+"/avat_") {
				t.Errorf("cloudinary_id: got %q, want the object key under avatars/<user>/", key)
			}
			// The url serves the stored bytes.
			got, err := http.Get(m["url"].(string))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(got.Body)
			got.Body.Close()
			if got.StatusCode != 200 || !bytes.Equal(body, data) {
				t.Errorf("GET url: status %d, %d bytes; want 200 and the %d uploaded bytes", got.StatusCode, len(body), len(data))
			}
		})
	}
}

func TestUploadRefusals(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	face := testfiles.Read(t, testfiles.FacePNG)
	noFace := testfiles.Read(t, testfiles.NoFaceJPEG)
	manyParts := []part{{field: "name", data: []byte("x")}}
	for i := 0; i < 1000; i++ {
		manyParts = append(manyParts, part{field: "extra" + strconv.Itoa(i), data: []byte("y")})
	}
	manyParts = append(manyParts, part{field: "file", filename: "f.png", contentType: "image/png", data: face})
	oversized := append(append([]byte{}, face[:64]...), make([]byte, 11<<20)...) // sniffs as PNG, 11 MB
	tests := []struct {
		name   string
		parts  []part
		status int
		msg    string
	}{
		{"no file", []part{{field: "name", data: []byte("x")}}, 400, "No file uploaded"},
		{"empty file", fileParts("x", nil, "f.png", "image/png"), 400, "No file uploaded"},
		{"no name", []part{{field: "file", filename: "f.png", contentType: "image/png", data: face}}, 400, "name required"},
		{"blank name", fileParts("  ", face, "f.png", "image/png"), 400, "name required"},
		{"renamed non-image", fileParts("x", []byte("#!/bin/sh\necho this is not an image\n"), "face.png", "image/png"), 415, "Unsupported file type"},
		{"faceless image", fileParts("x", noFace, "hubble.jpg", "image/jpeg"), 415, "Uploaded image failed moderation checks"},
		{"oversized image", fileParts("x", oversized, "big.png", "image/png"), 400, "File is too large"},
		{"1,001 parts", manyParts, 400, "Too many form parts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := upload(t, "/api/v1", acct.LiveKey, tc.parts...)
			assertStringError(t, res, tc.status, false, tc.msg)
		})
	}
	if keys := objectsUnder(t, "avatars/"+acct.User.ID+"/"); len(keys) != 0 {
		t.Errorf("objects left by refused uploads: %v", keys)
	}
	t.Run("not multipart", func(t *testing.T) {
		assertStringError(t, call(t, "POST", "/api/v1/avatars/upload", acct.LiveKey, map[string]any{"name": "x"}), 400, false, "No file uploaded")
	})
	t.Run("no key", func(t *testing.T) {
		assertStringError(t, upload(t, "/api/v1", "", fileParts("x", face, "f.png", "image/png")...), 401, false, "API key required")
	})
}

func TestUploadQuota(t *testing.T) {
	skipShort(t)
	webp := testfiles.Read(t, testfiles.FaceWebP)
	t.Run("free plan includes no avatars", func(t *testing.T) {
		acct := newAccount(t, "free")
		res := upload(t, "/api/v1", acct.LiveKey, fileParts("x", webp, "f.webp", "image/webp")...)
		assertStringError(t, res, 403, false, "Your plan does not include avatar creation")
	})
	t.Run("explorer allows 20 a cycle", func(t *testing.T) {
		acct := newAccount(t, "explorer")
		for i := 0; i < 20; i++ {
			if res := upload(t, "/api/v1", acct.LiveKey, fileParts("x", webp, "f.webp", "image/webp")...); res.Status != 201 {
				t.Fatalf("upload %d: status %d (%s)", i+1, res.Status, res.Body)
			}
		}
		res := upload(t, "/api/v1", acct.LiveKey, fileParts("x", webp, "f.webp", "image/webp")...)
		assertStringError(t, res, 403, false, "Avatar limit reached for this billing cycle")
		usage := call(t, "GET", "/v1/usage", acct.LiveKey, nil).JSON(t)
		av := dig(usage, "usage", "avatars")
		if dig(av, "used") != 20.0 || dig(av, "limit") != 20.0 || dig(av, "remaining") != 0.0 {
			t.Errorf("usage avatars: got %v, want used 20, limit 20, remaining 0", av)
		}
		if keys := objectsUnder(t, "avatars/"+acct.User.ID+"/"); len(keys) != 20 {
			t.Errorf("stored objects: got %d, want 20 (the refused one removed)", len(keys))
		}
	})
}

// uploadFace uploads the face as WebP and returns the avatar's two ids.
func uploadFace(t testing.TB, key string) (avatarID string, number int) {
	t.Helper()
	res := upload(t, "/api/v1", key, fileParts("Eileen", testfiles.Read(t, testfiles.FaceWebP), "f.webp", "image/webp")...)
	if res.Status != 201 {
		t.Fatalf("upload: %d %s", res.Status, res.Body)
	}
	m := res.JSON(t)
	return m["avatar_id"].(string), int(m["id"].(float64))
}

func TestAvatarUpdateDeleteList(t *testing.T) {
	skipShort(t)
	acct, other := newAccount(t, "pro"), newAccount(t, "pro")
	id, n := uploadFace(t, acct.LiveKey)
	path := "/api/v1/avatars/" + strconv.Itoa(n)

	t.Run("update", func(t *testing.T) {
		stack.Clock.Advance(time.Second)
		res := call(t, "PUT", path, acct.LiveKey, map[string]any{"name": "Renamed", "voice_id": "en-us+f3", "is_favorite": true})
		if res.Status != 200 || res.JSON(t)["success"] != true {
			t.Fatalf("PUT: %d %s", res.Status, res.Body)
		}
		list := call(t, "GET", "/v1/avatars", acct.LiveKey, nil).JSON(t)
		a := dig(list, "avatars").([]any)[0]
		if dig(a, "name") != "Renamed" || dig(a, "voice_id") != "en-us+f3" || dig(a, "is_favorite") != true || dig(a, "avatar_id") != id {
			t.Errorf("after update: got %v", a)
		}
		if dig(a, "updated_at") == dig(a, "created_at") {
			t.Errorf("updated_at: got %v, want it set by the update", dig(a, "updated_at"))
		}
		// null removes the voice
		call(t, "PUT", path, acct.LiveKey, map[string]any{"voice_id": nil})
		a = dig(call(t, "GET", "/v1/avatars", acct.LiveKey, nil).JSON(t), "avatars").([]any)[0]
		if dig(a, "voice_id") != nil {
			t.Errorf("voice_id after null: got %v, want null", dig(a, "voice_id"))
		}
	})
	t.Run("update refusals", func(t *testing.T) {
		assertStringError(t, call(t, "PUT", path, acct.LiveKey, map[string]any{}), 400, false, "No fields to update")
		assertStringError(t, call(t, "PUT", path, acct.LiveKey, ""), 400, false, "No fields to update")
		assertStringError(t, call(t, "PUT", path, acct.LiveKey, map[string]any{"voice_id": "klingon"}), 400, false, `Unknown voice_id "klingon"`)
		assertStringError(t, call(t, "PUT", path, other.LiveKey, map[string]any{"name": "x"}), 404, false, "Avatar not found")
		assertStringError(t, call(t, "PUT", "/api/v1/avatars/999999999", acct.LiveKey, map[string]any{"name": "x"}), 404, false, "Avatar not found")
		assertStringError(t, call(t, "PUT", "/api/v1/avatars/"+strings.Repeat("9", 3000), acct.LiveKey, map[string]any{"name": "x"}), 404, false, "Avatar not found")
	})
	t.Run("other tenants see nothing", func(t *testing.T) {
		if got := dig(call(t, "GET", "/v1/avatars", other.LiveKey, nil).JSON(t), "avatars").([]any); len(got) != 0 {
			t.Errorf("other tenant's list: got %v, want empty", got)
		}
		assertStructuredError(t, call(t, "DELETE", "/v1/avatars/"+id, other.LiveKey, nil), 404, "Avatar not found")
	})
	t.Run("catalog avatars cannot be deleted", func(t *testing.T) {
		assertStructuredError(t, call(t, "DELETE", "/v1/avatars/catalog/nasa/eileen-collins", acct.LiveKey, nil), 403, "You do not have permission to delete this avatar")
	})
	t.Run("delete", func(t *testing.T) {
		res := call(t, "DELETE", "/v1/avatars/"+id, acct.LiveKey, nil)
		if res.Status != 200 || res.JSON(t)["success"] != true {
			t.Fatalf("DELETE: %d %s", res.Status, res.Body)
		}
		assertStructuredError(t, call(t, "DELETE", "/api/v1/avatars/"+id, acct.LiveKey, nil), 404, "Avatar not found")
		if keys := objectsUnder(t, "avatars/"+acct.User.ID+"/"); len(keys) != 0 {
			t.Errorf("objects after delete: %v", keys)
		}
	})
}

func TestAvatarIDsWork(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	id, _ := uploadFace(t, acct.LiveKey)
	for _, avatar := range []string{id, "catalog/nasa/eileen-collins"} {
		b := validSession()
		b["avatar"] = avatar
		if res := call(t, "POST", "/v1/sessions", acct.LiveKey, b); res.Status != 201 {
			t.Errorf("Create Session with %s: %d %s", avatar, res.Status, res.Body)
		}
	}
	t.Run("preview", func(t *testing.T) {
		res := call(t, "POST", "/v1/avatars/preview", acct.LiveKey, map[string]any{"avatar_id": id})
		url, _ := res.JSON(t)["url"].(string)
		if res.Status != 200 || !strings.Contains(url, "#lnk_") {
			t.Errorf("preview: %d %s", res.Status, res.Body)
		}
		assertStructuredError(t, call(t, "POST", "/api/v1/avatars/preview", acct.LiveKey, map[string]any{}), 400, "avatar_id is required")
		assertStructuredError(t, call(t, "POST", "/v1/avatars/preview", acct.LiveKey, map[string]any{"avatar_id": "avat_nope"}), 404, "Avatar not found")
		assertStringError(t, call(t, "POST", "/v1/avatars/preview", "", map[string]any{"avatar_id": id}), 401, false, "API key required")
	})
}
