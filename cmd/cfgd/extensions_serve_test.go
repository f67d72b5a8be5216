package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// The staff rule of /cfg/extensions/ and of the extension API roots, on the
// router cfgd serve builds with its real authenticator: no credentials or
// a wrong password is 401, an API key (valid, never staff) is 403, staff
// get the list; an API root shows e-mail addresses to staff only. (A user
// who is not staff is refused with the real authenticator in
// api/rest/extensions; serve mails codes to the process's stdout, out of
// this test's reach.)
func TestServeExtensionsStaffRule(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	// Throttle keys of this test only: Redis is shared with other tests.
	t.Setenv("AUTH__REDIS_PREFIX", "cfgd-test:"+t.Name()+":"+time.Now().Format("150405.000000")+":")
	t.Setenv("EXTENSIONS__ENABLED", "newsletter")
	t.Setenv("NEWSLETTER__FROM_EMAIL", "news@example.com")
	t.Setenv("NEWSLETTER__FROM_NAME", "Acme News")
	if code, _, msg := runCLI("user", "create-superuser", "--email", "ext-admin@example.com", "--password", "long enough pw"); code != 0 {
		t.Fatalf("create-superuser: %d %s", code, msg)
	}
	code, out, msg := runCLI("apikey", "create", "--name", "ext", "--type", "service", "--user", "ext-admin@example.com")
	if code != 0 {
		t.Fatalf("apikey create: %d %s", code, msg)
	}
	key := regexp.MustCompile(`(?m)^cfgd_[A-Za-z0-9_-]{43}$`).FindString(out)
	r := start(t)
	waitStatus(t, r.base+"/readyz", 200)

	call := func(path string, header ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, r.base+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	staffBasic := "Basic " + basicOf("ext-admin@example.com", "long enough pw")
	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"anonymous", nil, http.StatusUnauthorized},
		{"wrong password", []string{"Authorization", "Basic " + basicOf("ext-admin@example.com", "wrong password")}, http.StatusUnauthorized},
		{"API key", []string{"X-API-Key", key}, http.StatusForbidden},
		{"staff", []string{"Authorization", staffBasic}, http.StatusOK},
	} {
		code, body := 0, ""
		// The key and the user reach the read models shortly after start.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if code, body = call("/cfg/extensions/", tc.header...); code == tc.want {
				break
			}
		}
		if code != tc.want {
			t.Errorf("/cfg/extensions/ as %s: %d %s, want %d", tc.name, code, body, tc.want)
		}
		if tc.want == http.StatusOK && !strings.Contains(body, `"name":"newsletter"`) {
			t.Errorf("the staff list lacks newsletter: %s", body)
		}
	}
	if code, body := call("/cfg/newsletter/api/"); code != http.StatusOK || strings.Contains(body, "@") {
		t.Errorf("API root anonymously: %d %s (no e-mail address allowed)", code, body)
	}
	if code, body := call("/cfg/newsletter/api/", "Authorization", staffBasic); code != http.StatusOK || !strings.Contains(body, "news@example.com") {
		t.Errorf("API root as staff: %d %s", code, body)
	}
}

func basicOf(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}
