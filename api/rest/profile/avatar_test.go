package profile_test

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/events/identity"
)

const avatarPath = "/api/profile/avatar/"

// tinyWebP is a valid 1x1 lossless WebP image.
const tinyWebP = "UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=="

func encoded(t *testing.T, format string, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: uint8(x * 40), G: uint8(y * 60), B: 200, A: 255})
		}
	}
	var b bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&b, img)
	case "jpeg":
		err = jpeg.Encode(&b, img, nil)
	case "gif":
		err = gif.Encode(&b, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// blankPNG is a valid 8-bit grayscale PNG of w×h black pixels, written
// row by row so that no w×h image is ever held: zeros deflate about
// 1,000 to 1, so 8192×8192 takes some 65 KB.
func blankPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(kind string, data []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(data)))
		b.Write(n[:])
		crc := crc32.NewIEEE()
		crc.Write([]byte(kind))
		crc.Write(data)
		b.WriteString(kind)
		b.Write(data)
		binary.BigEndian.PutUint32(n[:], crc.Sum32())
		b.Write(n[:])
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 0 // bit depth 8, grayscale
	chunk("IHDR", ihdr)
	var idat bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&idat, zlib.BestCompression)
	row := make([]byte, 1+w) // filter type 0, then w zero pixels
	for range h {
		if _, err := zw.Write(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	chunk("IDAT", idat.Bytes())
	chunk("IEND", nil)
	return b.Bytes()
}

// multipartBody puts data in field, with the file name and part type a
// client chose; it returns the body and its Content-Type.
func multipartBody(t *testing.T, field, filename, partType string, data []byte) (string, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="`+field+`"; filename="`+filename+`"`)
	h.Set("Content-Type", partType)
	pw, err := mw.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String(), mw.FormDataContentType()
}

func upload(t *testing.T, e *authtest.Env, token, field, filename, partType string, data []byte) authtest.Response {
	t.Helper()
	body, ct := multipartBody(t, field, filename, partType, data)
	return e.Do(t, http.MethodPost, avatarPath, body, append(authtest.Bearer(token), "Content-Type", ct)...)
}

// files lists what is stored under the media folder.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fetch(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	res, err := authtest.HTTPClient().Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, b
}

func TestAvatarUploadReplaceAndDelete(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("avatar"))
	stored := regexp.MustCompile(`^/media/(avatars/` + strconv.FormatInt(s.UserID, 10) + `/[0-9a-f]{32}\.(png|jpg|webp))$`)

	// A real PNG of as many pixels as an avatar may have (2048×2048): stored
	// under a name of the server's choosing, shown as a URL, served back
	// byte for byte.
	pngData := blankPNG(t, 2048, 2048)
	r := upload(t, e, s.Access, "avatar", "me.png", "image/png", pngData)
	if r.Status != http.StatusOK {
		t.Fatalf("png: %d %s", r.Status, r.Raw)
	}
	first, _ := r.Obj("profile")["avatar"].(string)
	m := stored.FindStringSubmatch(first)
	if m == nil || m[2] != "png" {
		t.Fatalf("avatar %q", first)
	}
	if got := files(t, e.MediaDir); len(got) != 1 || got[0] != m[1] {
		t.Fatalf("media folder holds %v", got)
	}
	status, hdr, body := fetch(t, e.URL+first)
	if status != http.StatusOK || !bytes.Equal(body, pngData) || hdr.Get("Content-Type") != "image/png" || hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("GET %s: %d %v", first, status, hdr)
	}
	if g := e.Do(t, http.MethodGet, path, nil, authtest.Bearer(s.Access)...); g.Obj("profile")["avatar"] != first {
		t.Fatalf("profile after upload: %s", g.Raw)
	}
	if n := e.EventCount(t, identity.UserStream(s.UserID), identity.AvatarChanged{}.EventType()); n != 1 {
		t.Fatalf("%d avatar events", n)
	}

	// A path-like file name with an image/png part type, holding a JPEG:
	// the content decides the extension, the name is ignored, and the old
	// file goes once the new one is recorded.
	outside := filepath.Join(e.MediaDir, "..", "..", "etc", "passwd.png")
	r = upload(t, e, s.Access, "avatar", "../../etc/passwd.png", "image/png", encoded(t, "jpeg", 5, 5))
	if r.Status != http.StatusOK {
		t.Fatalf("jpeg: %d %s", r.Status, r.Raw)
	}
	second, _ := r.Obj("profile")["avatar"].(string)
	if m2 := stored.FindStringSubmatch(second); m2 == nil || m2[2] != "jpg" || second == first {
		t.Fatalf("second avatar %q", second)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Fatalf("%s was written", outside)
	}
	if got := files(t, e.MediaDir); len(got) != 1 || "/media/"+got[0] != second {
		t.Fatalf("after replacing, media folder holds %v", got)
	}
	if status, _, _ := fetch(t, e.URL+first); status != http.StatusNotFound {
		t.Fatalf("old avatar still served: %d", status)
	}

	// WebP is the third accepted format.
	webpData, _ := base64.StdEncoding.DecodeString(tinyWebP)
	r = upload(t, e, s.Access, "avatar", "a", "application/octet-stream", webpData)
	third, _ := r.Obj("profile")["avatar"].(string)
	if m3 := stored.FindStringSubmatch(third); r.Status != http.StatusOK || m3 == nil || m3[2] != "webp" {
		t.Fatalf("webp: %d %s", r.Status, r.Raw)
	}
	if status, hdr, _ := fetch(t, e.URL+third); status != http.StatusOK || hdr.Get("Content-Type") != "image/webp" {
		t.Fatalf("GET webp: %d %v", status, hdr)
	}

	// DELETE clears the avatar and removes the file.
	r = e.Do(t, http.MethodDelete, avatarPath, nil, authtest.Bearer(s.Access)...)
	if r.Status != http.StatusOK || r.Obj("profile")["avatar"] != nil {
		t.Fatalf("delete: %d %s", r.Status, r.Raw)
	}
	if got := files(t, e.MediaDir); len(got) != 0 {
		t.Fatalf("after delete, media folder holds %v", got)
	}
	if r := e.Do(t, http.MethodDelete, avatarPath, nil, authtest.Bearer(s.Access)...); r.Status != http.StatusOK {
		t.Fatalf("second delete: %d %s", r.Status, r.Raw)
	}
	if n := e.EventCount(t, identity.UserStream(s.UserID), identity.AvatarChanged{}.EventType()); n != 4 {
		t.Fatalf("%d avatar events, want 4 (a delete without an avatar records nothing)", n)
	}
}

func TestAvatarRejectsWhatIsNotAnImage(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("badavatar"))
	const limit = 2 << 20
	pngMagic := []byte("\x89PNG\r\n\x1a\n")
	huge := blankPNG(t, 8192, 8192)
	if len(huge) > 100<<10 {
		t.Fatalf("the 64 Mpx PNG takes %d bytes; it should be a small file", len(huge))
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(huge)); err != nil || cfg.Width != 8192 || cfg.Height != 8192 {
		t.Fatalf("the 64 Mpx PNG: %+v %v", cfg, err)
	}
	tests := []struct {
		name     string
		field    string
		filename string
		data     []byte
		status   int
		msg      string // fields.avatar for a 400, error for a 413
	}{
		{"renamed text file", "avatar", "avatar.png", []byte("just some text, not an image\n"), 400,
			"must be a PNG, JPEG or WebP image; the file's content is text/plain"},
		{"GIF", "avatar", "a.png", encoded(t, "gif", 2, 2), 400, "must be a PNG, JPEG or WebP image; the file's content is image/gif"},
		{"PNG signature, then garbage", "avatar", "a.png", append(append([]byte{}, pngMagic...), "garbage"...), 400,
			"starts like a PNG image but is not a valid one"},
		{"WebP header, then garbage", "avatar", "a.webp", []byte("RIFF\x20\x00\x00\x00WEBPVP8 garbage-garbage-garbage"), 400,
			"starts like a WebP image but is not a valid one"},
		{"too many pixels", "avatar", "a.png", encoded(t, "png", 8193, 1), 400, "is 8193x1 pixels; at most 8192 on either side"},
		// 64 Mpx in 65 KB, each side within the side bound.
		{"64 megapixels in a small file", "avatar", "a.png", huge, 400, "is 8192x8192 pixels; at most 4194304 pixels in all (2048x2048)"},
		{"one row over 4 megapixels", "avatar", "a.png", blankPNG(t, 2048, 2049), 400, "is 2048x2049 pixels; at most 4194304 pixels in all (2048x2048)"},
		{"empty", "avatar", "a.png", nil, 400, "is empty"},
		{"other field", "picture", "a.png", encoded(t, "png", 1, 1), 400, `is required: send the image in the multipart field "avatar"`},
		{"path-like name, text inside", "avatar", "../../etc/passwd.png", []byte("root:x:0:0:root:/root:/bin/bash\n"), 400,
			"must be a PNG, JPEG or WebP image; the file's content is text/plain"},
		{"one byte over the limit", "avatar", "big.png", append(append([]byte{}, pngMagic...), make([]byte, limit+1-len(pngMagic))...), 413,
			"avatar is larger than the limit of 2097152 bytes"},
		{"far over the limit", "avatar", "big.png", make([]byte, 3*limit), 413, "avatar is larger than the limit of 2097152 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := upload(t, e, s.Access, tc.field, tc.filename, "image/png", tc.data)
			if r.Status != tc.status {
				t.Fatalf("%d %s", r.Status, r.Raw)
			}
			got := r.Field("avatar")
			if tc.status == http.StatusRequestEntityTooLarge {
				got = r.Str("error")
			}
			if got != tc.msg {
				t.Fatalf("message %q, want %q (%s)", got, tc.msg, r.Raw)
			}
		})
	}
	// Bodies that are not a multipart upload at all.
	for _, tc := range []struct {
		name, body, ctype string
	}{
		{"JSON", `{"avatar": "x.png"}`, "application/json"},
		{"no boundary", "--x\r\n", "multipart/form-data"},
		{"broken multipart", "--b\r\nContent-Disposition: form-data; name=\"avatar\"\r\n\r\nabc", "multipart/form-data; boundary=b"},
	} {
		if r := e.Do(t, http.MethodPost, avatarPath, tc.body, append(authtest.Bearer(s.Access), "Content-Type", tc.ctype)...); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", tc.name, r.Status, r.Raw)
		}
	}
	if got := files(t, e.MediaDir); len(got) != 0 {
		t.Errorf("rejected uploads left %v", got)
	}
	if n := e.EventCount(t, identity.UserStream(s.UserID), identity.AvatarChanged{}.EventType()); n != 0 {
		t.Errorf("%d avatar events after rejected uploads", n)
	}
	body, ct := multipartBody(t, "avatar", "a.png", "image/png", encoded(t, "png", 1, 1))
	if r := e.Do(t, http.MethodPost, avatarPath, body, "Content-Type", ct); r.Status != http.StatusUnauthorized {
		t.Errorf("no token: %d", r.Status)
	}
	if r := e.Do(t, http.MethodGet, avatarPath, nil, authtest.Bearer(s.Access)...); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", r.Status)
	}
}
