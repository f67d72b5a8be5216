package pages

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"

	"github.com/gorilla/mux"
)

// PageCSP is the Content-Security-Policy of the pages for people: their
// scripts, styles and data come from this origin only.
const PageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// StaffPage serves page to those staff lets through. Anyone staff turns
// away as not signed in (401) gets login, a sign-in form, instead of a
// JSON error; other refusals (403) are passed on as they are. Every
// answer carries PageCSP and is never cached.
func StaffPage(staff mux.MiddlewareFunc, page, login []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passed := false
		rec := &recorder{header: http.Header{}}
		staff(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed = true })).ServeHTTP(rec, r)
		h := w.Header()
		h.Set("Content-Security-Policy", PageCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		body, status := page, http.StatusOK
		switch {
		case passed:
		case rec.status == http.StatusUnauthorized:
			body, status = login, http.StatusUnauthorized
		default:
			for k, v := range rec.header {
				h[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
			return
		}
		h.Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	})
}

// recorder keeps the staff check's refusal to relay or replace it.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) { r.status = s }

// LoginPage renders the sign-in form a staff page shows anyone not signed
// in: heading names the page, css is its stylesheet's URL; the form signs
// in through cfgd/login.js and reloads the page.
func (a *Assets) LoginPage(heading, css string) ([]byte, error) {
	t, err := template.New("login").Parse(loginHTML)
	if err != nil {
		return nil, fmt.Errorf("login page: %w", err)
	}
	var b bytes.Buffer
	err = t.Execute(&b, map[string]string{"Heading": heading, "CSS": css, "Login": a.URL("cfgd/login.js")})
	if err != nil {
		return nil, fmt.Errorf("login page: %w", err)
	}
	return b.Bytes(), nil
}

const loginHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · cfgd</title>
<link rel="stylesheet" href="{{.CSS}}">
</head>
<body>
<header><h1>{{.Heading}}</h1></header>
<main>
  <form id="login" class="login">
    <p>Sign in with a staff account.</p>
    <label>E-mail <input id="email" name="email" type="email" autocomplete="username" required></label>
    <label>Password <input id="password" name="password" type="password" autocomplete="current-password" required></label>
    <button type="submit" id="signin">Sign in</button>
    <div id="error" class="error" role="alert" hidden></div>
  </form>
</main>
<script src="{{.Login}}"></script>
</body>
</html>
`
