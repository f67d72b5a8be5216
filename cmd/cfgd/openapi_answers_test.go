package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// contract is a running cfgd serve and the document it serves: every
// answer do gets is checked against that document.
type contract struct {
	t      *testing.T
	base   string
	doc    *openapi3.T
	router routers.Router
	// called counts the answers seen per operationId.
	called map[string]int
	// succeeded are the calls that got a 2xx, with their operation.
	succeeded []succeeded
}

type succeeded struct {
	call
	op *openapi3.Operation
}

// answer is one response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %.300s", err, a.body)
	}
	return m
}

// call is one request of the table: the operation it must reach, the
// request, and the status it must get.
type call struct {
	name   string
	op     string
	method string
	path   string
	ctype  string
	body   []byte
	auth   func(*http.Request)
	want   int
	// also accepted (the effect may take longer than the answer waits).
	orWant int
	// before runs first (a wait for an earlier call's effect, a fault).
	before func()
	// partial marks a body invalid in part on purpose: the server stores
	// the rest (a partial 202), so the request is not held to the schema
	// and the call is not a model for the derived error cases.
	partial bool
	// route names the document's path when a path parameter holds a "/"
	// (/static/{asset}, /media/{file}), which an OpenAPI router never
	// matches: a parameter ends at a slash.
	route string
	// pathOf, when set, gives the path after before ran (an id an earlier
	// call's effect made).
	pathOf func() string
}

// do sends c, checks that it reached operation c.op and got c.want, and
// validates the response (status, headers, body) against the served
// document; a request meant to succeed is validated against it too.
func (s *contract) do(c call) answer {
	t := s.t
	t.Helper()
	if c.before != nil {
		c.before()
	}
	if c.pathOf != nil {
		c.path = c.pathOf()
	}
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, s.base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.ctype != "" {
		req.Header.Set("Content-Type", c.ctype)
	}
	if c.auth != nil {
		c.auth(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	a := answer{status: res.StatusCode, header: res.Header, body: raw}
	if a.status != c.want && (c.orWant == 0 || a.status != c.orWant) {
		t.Errorf("%s: %s %s answered %d, want %d: %.300s", c.name, c.method, c.path, a.status, c.want, raw)
	}

	// The router matches the path and method only; the host is the test's.
	vreq := req.Clone(context.Background())
	vreq.Host, vreq.URL.Host, vreq.URL.Scheme = "", "", ""
	if c.body != nil {
		vreq.Body = io.NopCloser(bytes.NewReader(c.body))
	}
	route, params, err := s.router.FindRoute(vreq)
	if c.route != "" {
		route, params, err = s.byTemplate(vreq, c.route)
	}
	if err != nil {
		t.Errorf("%s: %s %s is not in the served document: %v", c.name, c.method, c.path, err)
		return a
	}
	if route.Operation.OperationID != c.op {
		t.Errorf("%s: %s %s is operation %q, the table says %q", c.name, c.method, c.path, route.Operation.OperationID, c.op)
	}
	s.called[route.Operation.OperationID]++
	if a.status < 300 && !c.partial {
		s.succeeded = append(s.succeeded, succeeded{c, route.Operation})
	}
	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if a.status < 300 && !c.partial {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("%s: the request the server accepted does not match the document: %v", c.name, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: a.status, Header: a.header,
		Body:    io.NopCloser(bytes.NewReader(raw)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: %s %s answered %d, which the document does not describe: %v\nbody: %.500s", c.name, c.method, c.path, a.status, err, raw)
	}
	return a
}

// errorCases derives, once per operation from a call that succeeded, the
// answers every such operation must also give: 401 without credentials
// when it takes no anonymous callers, for a JSON body, 400 for one that
// is not JSON and 415 for one not sent as application/json, and 400 for
// a query parameter that is not valid URL encoding (never read as absent).
func (s *contract) errorCases() []call {
	var out []call
	seen := map[string]bool{}
	for _, ok := range s.succeeded {
		id := ok.op.OperationID
		if seen[id] {
			continue
		}
		seen[id] = true
		security := s.doc.Security
		if ok.op.Security != nil {
			security = *ok.op.Security
		}
		anonymous := len(security) == 0
		for _, req := range security {
			anonymous = anonymous || len(req) == 0
		}
		if !anonymous {
			c := ok.call
			c.name, c.auth, c.want, c.orWant = ok.name+", no credentials", nil, http.StatusUnauthorized, 0
			out = append(out, c)
		}
		if ok.ctype == "application/json" {
			c := ok.call
			c.name, c.body, c.want, c.orWant = ok.name+", not JSON", []byte(`{"a":`), http.StatusBadRequest, 0
			out = append(out, c)
			c.name, c.ctype, c.body, c.want = ok.name+", text/plain", "text/plain", ok.body, http.StatusUnsupportedMediaType
			out = append(out, c)
		}
		if name := firstQueryParameter(ok.op); name != "" {
			c := ok.call
			c.name, c.want, c.orWant = ok.name+", query not URL encoding", http.StatusBadRequest, 0
			c.path = withBadPair(c.path, name)
			if pathOf := c.pathOf; pathOf != nil {
				c.pathOf = func() string { return withBadPair(pathOf(), name) }
			}
			out = append(out, c)
		}
	}
	return out
}

// firstQueryParameter is the name of op's first query parameter, or "".
func firstQueryParameter(op *openapi3.Operation) string {
	for _, p := range op.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
			return p.Value.Name
		}
	}
	return ""
}

// withBadPair adds name=%zz, which does not decode, to path's query.
func withBadPair(path, name string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + name + "=%zz"
}

// byTemplate is the route of tpl and the method of req, with tpl's one
// parameter set to the rest of req's path.
func (s *contract) byTemplate(req *http.Request, tpl string) (*routers.Route, map[string]string, error) {
	item := s.doc.Paths.Value(tpl)
	if item == nil || item.GetOperation(req.Method) == nil {
		return nil, nil, fmt.Errorf("no %s %s", req.Method, tpl)
	}
	prefix, param, _ := strings.Cut(tpl, "{")
	rest, ok := strings.CutPrefix(req.URL.Path, prefix)
	if !ok {
		return nil, nil, fmt.Errorf("%s is not under %s", req.URL.Path, prefix)
	}
	route := &routers.Route{Spec: s.doc, Path: tpl, PathItem: item, Method: req.Method, Operation: item.GetOperation(req.Method)}
	return route, map[string]string{strings.TrimSuffix(param, "}"): rest}, nil
}

func basic(email, password string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth(email, password) }
}

func header(kv ...string) func(*http.Request) {
	return func(r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
	}
}

// waitForRequestLog waits until the request log lists an ingested event,
// so the list's records are checked, not only an empty list.
func waitForRequestLog(t *testing.T, base string, auth func(*http.Request)) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/grpc/monitor/requests/", nil)
		auth(req)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct{ Count int }
		err = json.NewDecoder(res.Body).Decode(&page)
		res.Body.Close()
		if err == nil && page.Count > 0 {
			return
		}
	}
	t.Fatal("no ingested event reached the request log within 60s")
}

// firstRequestLogID is the id of the newest request log.
func firstRequestLogID(t *testing.T, base string, auth func(*http.Request)) uint64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/grpc/monitor/requests/?page_size=1", nil)
	auth(req)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var page struct{ Results []struct{ ID uint64 } }
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil || len(page.Results) == 0 {
		t.Fatalf("no request log to read: %v", err)
	}
	return page.Results[0].ID
}

// avatarForm is a multipart body with file as its field "avatar".
func avatarForm(file []byte) (body []byte, contentType string) {
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("avatar", "me.png")
	_, _ = fw.Write(file)
	_ = mw.Close()
	return form.Bytes(), mw.FormDataContentType()
}

func onePixelPNG(t *testing.T) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Every operation of the OpenAPI document cfgd serves (GET /api/schema/)
// is called on a real cfgd serve, with Postgres, ClickHouse, Redis and the
// embedded Kafka, at least once successfully and, where cheap, with bad
// input or no credentials; every answer must be one the document lists
// for the operation (status, headers, body schema), and every request the
// server accepted must match the document's request schema.
func TestServedAnswersMatchTheOpenAPIDocument(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	baseEnv(t, pgURL)
	chOpts, _ := testenv.ClickHouse(t)
	t.Setenv("CLICKHOUSE__URL", "clickhouse://127.0.0.1:9000/"+chOpts.Auth.Database)
	mail := authtest.StartSMTP(t)
	t.Setenv("EMAIL__BACKEND", "smtp")
	t.Setenv("EMAIL__SMTP_HOST", mail.Host)
	t.Setenv("EMAIL__SMTP_PORT", mail.Port)
	t.Setenv("EMAIL__SMTP_SECURITY", "none")
	t.Setenv("MEDIA__DIR", t.TempDir())
	for k, v := range map[string]string{
		"EXTENSIONS__ENABLED":                      "payments,leads,support,newsletter",
		"PAYMENTS_API_KEYS__CRYPTO_API_KEY":        "ck_test_0123456789",
		"PAYMENTS_API_KEYS__CRYPTO_WEBHOOK_SECRET": "whsec_0123456789",
		"TELEGRAM__BOT_TOKEN":                      "123:abc",
		"LEADS__NOTIFICATION_EMAIL":                "leads@example.com",
		"NEWSLETTER__FROM_EMAIL":                   "news@example.com",
		"NEWSLETTER__FROM_NAME":                    "News",
	} {
		t.Setenv(k, v)
	}
	// Queues, worker keys and sign-in throttles of this test only (the
	// per-IP limits would otherwise count every test from 127.0.0.1).
	prefix := "oa" + strings.TrimSuffix(authtest.Email("q"), "@example.com") + "-"
	t.Setenv("TASKS__QUEUES", prefix+"default")
	t.Setenv("TASKS__WORKER_ID", prefix+"worker")
	t.Setenv("TASKS__HEARTBEAT", "200ms")
	// The worker and the CLI find the embedded broker at its address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KAFKA__EMBEDDED_ADDR", l.Addr().String())
	_ = l.Close()
	t.Setenv("TASKS__KEY_PREFIX", "cfgd-test:"+prefix+"tasks:")
	t.Setenv("AUTH__REDIS_PREFIX", "cfgd-test:"+prefix+"auth:")
	t.Cleanup(func() {
		ctx := context.Background()
		o, _ := redis.ParseURL(authtest.RedisURL())
		rdb := redis.NewClient(o)
		defer rdb.Close()
		_ = asynq.NewInspectorFromRedisClient(rdb).DeleteQueue(prefix+"default", true)
		for it := rdb.Scan(ctx, 0, "cfgd-test:"+prefix+"*", 100).Iterator(); it.Next(ctx); {
			rdb.Del(ctx, it.Val())
		}
	})

	const staffPassword = "a long staff password"
	staffEmail := authtest.Email("staff")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"user", "create-superuser", "--email", staffEmail, "--password", staffPassword}, &out, &errOut); err != nil {
		t.Fatalf("create-superuser: %v %s", err, errOut.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"apikey", "create", "--name", "svc", "--type", "service", "--user", staffEmail}, &out, &errOut); err != nil {
		t.Fatalf("apikey create: %v %s", err, errOut.String())
	}
	apiKey := regexp.MustCompile(`(?m)^cfgd_[A-Za-z0-9_-]{43}$`).FindString(out.String())
	keyID := regexp.MustCompile(`id=(\d+)`).FindStringSubmatch(out.String())[1]
	srv := start(t)
	waitStatus(t, srv.base+"/readyz", http.StatusOK)
	// A live worker that has run one task: the worker and task lists have
	// entries to check, and a worker command has a worker to reach.
	wctx, stopWorker := context.WithCancel(context.Background())
	var wout, werr syncBuffer
	wdone := make(chan error, 1)
	go func() { wdone <- run(wctx, []string{"worker"}, &wout, &werr) }()
	t.Cleanup(func() {
		stopWorker()
		if err := <-wdone; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	if code, out, msg := runCLI("task", "enqueue", "--queue", prefix+"default", "--type", "demo:echo", "--payload", `{"message":"hi"}`); code != 0 {
		t.Fatalf("enqueue: %d %q %s", code, out, msg)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var stats struct {
			Completed int `json:"completed_tasks"`
		}
		req, _ := http.NewRequest(http.MethodGet, srv.base+"/api/tasks/task-statistics/", nil)
		req.SetBasicAuth(staffEmail, staffPassword)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(res.Body).Decode(&stats)
		res.Body.Close()
		if stats.Completed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task never completed; worker: %s", werr.String())
		}
	}

	// The document the server serves, not the file in the repository.
	code, schema := get(t, srv.base+"/api/schema/")
	if code != http.StatusOK {
		t.Fatalf("/api/schema/: %d", code)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// The pages are text; kin-openapi knows no decoder for text/html.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	s := &contract{t: t, base: srv.base, doc: doc, router: router, called: map[string]int{}}

	staff := basic(staffEmail, staffPassword)
	js := "application/json"

	// A user signs in with an e-mailed code; a second one is logged out.
	signIn := func(email string) (access, refresh string) {
		s.do(call{name: "code for " + email, op: "requestOtp", method: "POST", path: "/api/auth/otp/request/", ctype: js,
			body: []byte(fmt.Sprintf(`{"identifier":%q,"source_url":"https://example.com/?utm_source=facebook"}`, email)), want: 200})
		m, ok := mail.Last(email)
		if !ok || m.Code() == "" {
			t.Fatalf("no code e-mailed to %s", email)
		}
		a := s.do(call{name: "verify " + email, op: "verifyOtp", method: "POST", path: "/api/auth/otp/verify/", ctype: js,
			body: []byte(fmt.Sprintf(`{"identifier":%q,"otp_code":%q}`, email, m.Code())), want: 200})
		tokens, _ := a.json(t)["tokens"].(map[string]any)
		access, _ = tokens["access"].(string)
		refresh, _ = tokens["refresh"].(string)
		if access == "" || refresh == "" {
			t.Fatalf("verify: %s", a.body)
		}
		return access, refresh
	}
	access, refresh := signIn(authtest.Email("user"))
	_, otherRefresh := signIn(authtest.Email("other"))
	user := header("Authorization", "Bearer "+access)

	// The admin session: cookies and the CSRF token from the login answer.
	login := s.do(call{name: "login", op: "login", method: "POST", path: "/api/auth/login/", ctype: js,
		body: []byte(fmt.Sprintf(`{"email":%q,"password":%q}`, staffEmail, staffPassword)), want: 200})
	var cookies []string
	for _, c := range (&http.Response{Header: login.header}).Cookies() {
		cookies = append(cookies, c.Name+"="+c.Value)
	}
	csrf, _ := login.json(t)["csrf_token"].(string)
	session := header("Cookie", strings.Join(cookies, "; "))
	sessionCSRF := header("Cookie", strings.Join(cookies, "; "), "X-CSRFToken", csrf)

	// An avatar, to read back under /media/ and remove.
	form, formType := avatarForm(onePixelPNG(t))
	up := s.do(call{name: "avatar upload", op: "uploadAvatar", method: "POST", path: "/api/profile/avatar/", ctype: formType,
		body: form, auth: user, want: 200})
	bigForm, bigFormType := avatarForm(bytes.Repeat([]byte{0}, 2<<20+1))
	profile, _ := up.json(t)["profile"].(map[string]any)
	avatar, _ := profile["avatar"].(string)
	if !strings.HasPrefix(avatar, "/media/") {
		t.Fatalf("avatar URL %q", avatar)
	}

	// A key made through the API, revoked below.
	created := s.do(call{name: "create key", op: "createApiKey", method: "POST", path: "/admin/api-keys/", ctype: js,
		body: []byte(fmt.Sprintf(`{"name":"ci","key_type":"cli","user_email":%q}`, staffEmail)), auth: staff, want: 201})
	newKey, _ := created.json(t)["api_key"].(map[string]any)
	newKeyID := fmt.Sprint(newKey["id"])

	// An asset the docs page links.
	_, docsPage := get(t, srv.base+"/api/docs/")
	asset := regexp.MustCompile(`(?:src|href)="(/static/[^"]+)"`).FindStringSubmatch(docsPage)
	if asset == nil {
		t.Fatal("the docs page links no asset")
	}

	// The request-log tables exist once the pipeline has migrated ClickHouse.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, srv.base+"/api/grpc/monitor/overview/", nil)
		staff(req)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request-log read model never answered: %d", res.StatusCode)
		}
	}

	event := `{"service_name":"cfgd.test.v1.Test","method_name":"Ping","grpc_status_code":"OK","duration_ms":3}`
	calls := []call{
		{name: "liveness", op: "getHealth", method: "GET", path: "/healthz", want: 200},
		{name: "readiness", op: "getReadiness", method: "GET", path: "/readyz", want: 200},
		{name: "index", op: "getIndex", method: "GET", path: "/", want: 200},
		{name: "index page", op: "getIndex", method: "GET", path: "/", auth: header("Accept", "text/html"), want: 200},
		{name: "schema", op: "getOpenApiDocument", method: "GET", path: "/api/schema/", want: 200},
		{name: "docs page", op: "getApiDocsPage", method: "GET", path: "/api/docs/", want: 200},
		{name: "asset", op: "getStaticAsset", method: "GET", path: asset[1], route: "/static/{asset}", want: 200},
		{name: "no asset", op: "getStaticAsset", method: "GET", path: "/static/no/such.js", route: "/static/{asset}", want: 404},
		{name: "media", op: "getMediaFile", method: "GET", path: avatar, route: "/media/{file}", want: 200},
		{name: "no media", op: "getMediaFile", method: "GET", path: "/media/avatars/0/none.png", route: "/media/{file}", want: 404},
		{name: "jwks", op: "getJwks", method: "GET", path: "/.well-known/jwks.json", want: 200},
		{name: "discovery", op: "getOpenIDConfiguration", method: "GET", path: "/.well-known/openid-configuration", want: 200},
		{name: "metrics", op: "getMetrics", method: "GET", path: "/metrics", want: 200},

		{name: "code, bad JSON", op: "requestOtp", method: "POST", path: "/api/auth/otp/request/", ctype: js, body: []byte(`{"identifier":`), want: 400},
		{name: "code, not an address", op: "requestOtp", method: "POST", path: "/api/auth/otp/request/", ctype: js, body: []byte(`{"identifier":"nobody"}`), want: 400},
		{name: "code, form body", op: "requestOtp", method: "POST", path: "/api/auth/otp/request/", ctype: "application/x-www-form-urlencoded", body: []byte(`identifier=a@example.com`), want: 415},
		{name: "verify, never requested", op: "verifyOtp", method: "POST", path: "/api/auth/otp/verify/", ctype: js,
			body: []byte(fmt.Sprintf(`{"identifier":%q,"otp_code":"123456"}`, authtest.Email("none"))), want: 400},
		{name: "verify, text body", op: "verifyOtp", method: "POST", path: "/api/auth/otp/verify/", ctype: "text/plain", body: []byte(`{}`), want: 415},
		{name: "refresh", op: "refreshToken", method: "POST", path: "/api/auth/token/refresh/", ctype: js, body: []byte(fmt.Sprintf(`{"refresh":%q}`, refresh)), want: 200},
		{name: "refresh, bad token", op: "refreshToken", method: "POST", path: "/api/auth/token/refresh/", ctype: js, body: []byte(`{"refresh":"x.y.z"}`), want: 401},
		{name: "refresh, unknown field", op: "refreshToken", method: "POST", path: "/api/auth/token/refresh/", ctype: js, body: []byte(`{"Refresh":"x"}`), want: 400},
		{name: "logout", op: "logout", method: "POST", path: "/api/auth/logout/", ctype: js, body: []byte(fmt.Sprintf(`{"refresh":%q}`, otherRefresh)), want: 200},
		{name: "logout, revoked token", op: "logout", method: "POST", path: "/api/auth/logout/", ctype: js, body: []byte(`{"refresh":"x.y.z"}`), want: 401},
		{name: "cookie logout without CSRF", op: "logout", method: "POST", path: "/api/auth/logout/", auth: session, want: 403},
		{name: "login, wrong password", op: "login", method: "POST", path: "/api/auth/login/", ctype: js,
			body: []byte(fmt.Sprintf(`{"email":%q,"password":"wrong password"}`, staffEmail)), want: 401},
		{name: "login, bad JSON", op: "login", method: "POST", path: "/api/auth/login/", ctype: js, body: []byte(`[]`), want: 400},

		{name: "profile", op: "getProfile", method: "GET", path: "/api/profile/", auth: user, want: 200},
		{name: "profile, no token", op: "getProfile", method: "GET", path: "/api/profile/", want: 401},
		{name: "profile, bad token", op: "getProfile", method: "GET", path: "/api/profile/", auth: header("Authorization", "Bearer x.y.z"), want: 401},
		{name: "profile update", op: "updateProfile", method: "PATCH", path: "/api/profile/", ctype: js, body: []byte(`{"first_name":"Ann","date_of_birth":"1990-04-01"}`), auth: user, want: 200},
		{name: "profile update, bad field", op: "updateProfile", method: "PATCH", path: "/api/profile/", ctype: js, body: []byte(`{"phone":"call me"}`), auth: user, want: 400},
		{name: "profile update, text body", op: "updateProfile", method: "PATCH", path: "/api/profile/", ctype: "text/plain", body: []byte(`{}`), auth: user, want: 415},
		{name: "avatar, not an image", op: "uploadAvatar", method: "POST", path: "/api/profile/avatar/", ctype: js, body: []byte(`{}`), auth: user, want: 400},
		{name: "avatar, over PROFILE__AVATAR_MAX_BYTES", op: "uploadAvatar", method: "POST", path: "/api/profile/avatar/", ctype: bigFormType, body: bigForm, auth: user, want: 413},
		{name: "avatar delete", op: "deleteAvatar", method: "DELETE", path: "/api/profile/avatar/", auth: user, want: 200},
		{name: "avatar delete, no token", op: "deleteAvatar", method: "DELETE", path: "/api/profile/avatar/", want: 401},

		{name: "top sources", op: "listTopSources", method: "GET", path: "/api/analytics/sources/top/", auth: staff, want: 200},
		{name: "top sources, no credentials", op: "listTopSources", method: "GET", path: "/api/analytics/sources/top/", want: 401},
		{name: "top sources, not staff", op: "listTopSources", method: "GET", path: "/api/analytics/sources/top/", auth: user, want: 403},
		{name: "source links", op: "listSourceLinks", method: "GET", path: "/api/analytics/sources/links/?days=7", auth: session, want: 200},
		{name: "source links, bad days", op: "listSourceLinks", method: "GET", path: "/api/analytics/sources/links/?days=0", auth: staff, want: 400},

		{name: "payments root", op: "getPaymentsExtension", method: "GET", path: "/cfg/payments/api/", want: 200},
		{name: "leads root", op: "getLeadsExtension", method: "GET", path: "/cfg/leads/api/", want: 200},
		{name: "support root", op: "getSupportExtension", method: "GET", path: "/cfg/support/api/", want: 200},
		{name: "newsletter root", op: "getNewsletterExtension", method: "GET", path: "/cfg/newsletter/api/", want: 200},
		{name: "extensions", op: "listExtensions", method: "GET", path: "/cfg/extensions/", auth: staff, want: 200},
		{name: "extensions, bad password", op: "listExtensions", method: "GET", path: "/cfg/extensions/", auth: basic(staffEmail, "wrong password"), want: 401},

		{name: "keys", op: "listApiKeys", method: "GET", path: "/api/grpc/api-keys/?is_active=true&page_size=10", auth: staff, want: 200},
		{name: "keys, bad page", op: "listApiKeys", method: "GET", path: "/api/grpc/api-keys/?page=0", auth: staff, want: 400},
		{name: "key stats", op: "getApiKeyStats", method: "GET", path: "/api/grpc/api-keys/stats/", auth: staff, want: 200},
		{name: "key", op: "getApiKey", method: "GET", path: "/api/grpc/api-keys/" + keyID + "/", auth: staff, want: 200},
		{name: "no such key", op: "getApiKey", method: "GET", path: "/api/grpc/api-keys/999999999/", auth: staff, want: 404},
		{name: "gRPC server", op: "getGrpcServerHealth", method: "GET", path: "/api/grpc/monitor/health/", auth: staff, want: 200},
		{name: "create key, bad type", op: "createApiKey", method: "POST", path: "/admin/api-keys/", ctype: js,
			body: []byte(fmt.Sprintf(`{"name":"x","key_type":"root","user_email":%q}`, staffEmail)), auth: staff, want: 400},
		{name: "create key, session without CSRF", op: "createApiKey", method: "POST", path: "/admin/api-keys/", ctype: js,
			body: []byte(`{}`), auth: session, want: 403},
		{name: "revoke key", op: "revokeApiKey", method: "POST", path: "/admin/api-keys/" + newKeyID + "/revoke/", auth: sessionCSRF, want: 200},
		{name: "revoke no such key", op: "revokeApiKey", method: "POST", path: "/admin/api-keys/999999999/revoke/", auth: staff, want: 404},

		{name: "proto files, API key", op: "listProtoFiles", method: "GET", path: "/cfg/grpc/proto-files/", auth: header("X-API-Key", apiKey), want: 200},
		{name: "proto files, bad API key", op: "listProtoFiles", method: "GET", path: "/cfg/grpc/proto-files/", auth: header("X-API-Key", "cfgd_nope"), want: 401},
		{name: "proto zip", op: "downloadProtoFiles", method: "GET", path: "/cfg/grpc/proto-files/download-all/", auth: staff, want: 200},
		{name: "generate protos", op: "generateProtoFiles", method: "POST", path: "/cfg/grpc/proto-files/generate/", ctype: js, body: []byte(`{"force":true}`), auth: staff, want: 200},
		{name: "generate protos, text body", op: "generateProtoFiles", method: "POST", path: "/cfg/grpc/proto-files/generate/", ctype: "text/plain", body: []byte(`{}`), auth: staff, want: 415},
		{name: "proto file", op: "getProtoFile", method: "GET", path: "/cfg/grpc/proto-files/apikeys/", auth: staff, want: 200},
		{name: "proto file, bad label", op: "getProtoFile", method: "GET", path: "/cfg/grpc/proto-files/a%5Cb/", auth: staff, want: 400},
		{name: "no such proto file", op: "getProtoFile", method: "GET", path: "/cfg/grpc/proto-files/nosuchapp/", auth: staff, want: 404},

		{name: "queues", op: "getQueueStatus", method: "GET", path: "/api/tasks/queue-status/", auth: staff, want: 200},
		{name: "task statistics", op: "getTaskStatistics", method: "GET", path: "/api/tasks/task-statistics/", auth: staff, want: 200},
		{name: "workers", op: "listWorkers", method: "GET", path: "/api/tasks/workers/", auth: staff, want: 200},
		{name: "recent tasks", op: "listRecentTasks", method: "GET", path: "/api/tasks/recent/?limit=5", auth: staff, want: 200},
		{name: "recent tasks, bad limit", op: "listRecentTasks", method: "GET", path: "/api/tasks/recent/?limit=0", auth: staff, want: 400},
		{name: "pause queue", op: "manageQueue", method: "POST", path: "/api/tasks/queue-manage/", ctype: js,
			body: []byte(fmt.Sprintf(`{"action":"pause","queue_name":%q}`, prefix+"default")), auth: sessionCSRF, want: 200, orWant: 202},
		{name: "queue, bad action", op: "manageQueue", method: "POST", path: "/api/tasks/queue-manage/", ctype: js,
			body: []byte(fmt.Sprintf(`{"action":"drop","queue_name":%q}`, prefix+"default")), auth: staff, want: 400},
		{name: "no such queue", op: "manageQueue", method: "POST", path: "/api/tasks/queue-manage/", ctype: js,
			body: []byte(`{"action":"pause","queue_name":"nosuchqueue"}`), auth: staff, want: 404},
		{name: "queue, text body", op: "manageQueue", method: "POST", path: "/api/tasks/queue-manage/", ctype: "text/plain", body: []byte(`{}`), auth: staff, want: 415},
		{name: "restart worker", op: "manageWorker", method: "POST", path: "/api/tasks/worker-manage/", ctype: js,
			body: []byte(fmt.Sprintf(`{"action":"restart","worker_id":%q}`, prefix+"worker")), auth: staff, want: 200, orWant: 202},
		{name: "no such worker", op: "manageWorker", method: "POST", path: "/api/tasks/worker-manage/", ctype: js,
			body: []byte(`{"action":"stop","worker_id":"nobody-1"}`), auth: staff, want: 404},
		{name: "worker, no credentials", op: "manageWorker", method: "POST", path: "/api/tasks/worker-manage/", ctype: js, body: []byte(`{}`), want: 401},
		{name: "queues, all", op: "getQueueStatus", method: "GET", path: "/api/tasks/queue-status/?all=true", auth: staff, want: 200,
			before: func() {
				// A task that waits an hour: archived, listed and deleted below.
				o, _ := redis.ParseURL(authtest.RedisURL())
				rdb := redis.NewClient(o)
				defer rdb.Close()
				c := asynq.NewClientFromRedisClient(rdb)
				if _, err := c.Enqueue(asynq.NewTask("demo:echo", []byte(`{"n": 1}`)), asynq.Queue(prefix+"default"), asynq.TaskID(prefix+"task"), asynq.ProcessIn(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "queues, bad all", op: "getQueueStatus", method: "GET", path: "/api/tasks/queue-status/?all=maybe", auth: staff, want: 400},
		{name: "scheduled tasks", op: "listQueueTasks", method: "GET", path: "/api/tasks/tasks/?state=scheduled&queue=" + prefix + "default", auth: staff, want: 200},
		{name: "tasks, bad state", op: "listQueueTasks", method: "GET", path: "/api/tasks/tasks/?state=lost&queue=" + prefix + "default", auth: staff, want: 400},
		{name: "task", op: "getQueueTask", method: "GET", path: "/api/tasks/task/?id=" + prefix + "task", auth: staff, want: 200},
		{name: "no such task", op: "getQueueTask", method: "GET", path: "/api/tasks/task/?id=nosuchtask", auth: staff, want: 404},
		{name: "task history", op: "getTaskHistory", method: "GET", path: "/api/tasks/history/?minutes=30", auth: staff, want: 200},
		{name: "task history, bad minutes", op: "getTaskHistory", method: "GET", path: "/api/tasks/history/?minutes=0", auth: staff, want: 400},
		{name: "archive task", op: "manageQueueTask", method: "POST", path: "/api/tasks/task-manage/", ctype: js,
			body: []byte(fmt.Sprintf(`{"action":"archive","task_id":%q}`, prefix+"task")), auth: sessionCSRF, want: 200, orWant: 202},
		{name: "task, bad action", op: "manageQueueTask", method: "POST", path: "/api/tasks/task-manage/", ctype: js,
			body: []byte(fmt.Sprintf(`{"action":"explode","task_id":%q}`, prefix+"task")), auth: staff, want: 400},
		{name: "task action, no such task", op: "manageQueueTask", method: "POST", path: "/api/tasks/task-manage/", ctype: js,
			body: []byte(`{"action":"delete","task_id":"nosuchtask"}`), auth: staff, want: 404},
		{name: "delete archived tasks", op: "manageQueueTasks", method: "POST", path: "/api/tasks/bulk-manage/", ctype: js,
			body: []byte(fmt.Sprintf(`{"action":"delete","queue_name":%q,"state":"archived"}`, prefix+"default")), auth: staff, want: 200, orWant: 202},
		{name: "bulk, not applicable", op: "manageQueueTasks", method: "POST", path: "/api/tasks/bulk-manage/", ctype: js,
			body: []byte(fmt.Sprintf(`{"action":"run","queue_name":%q,"state":"pending"}`, prefix+"default")), auth: staff, want: 400},
		{name: "bulk, no such queue", op: "manageQueueTasks", method: "POST", path: "/api/tasks/bulk-manage/", ctype: js,
			body: []byte(`{"action":"delete","queue_name":"nosuchqueue","state":"pending"}`), auth: staff, want: 404},
		{name: "task page", op: "getTaskDashboard", method: "GET", path: "/admin/tasks/dashboard/", auth: session, want: 200},
		{name: "task page, sign-in form", op: "getTaskDashboard", method: "GET", path: "/admin/tasks/dashboard/", want: 401},

		{name: "OTLP export, JSON", op: "exportTraces", method: "POST", path: "/v1/traces", ctype: js,
			body: []byte(`{"resourceSpans":[]}`), auth: header("X-API-Key", apiKey), want: 200},
		{name: "OTLP export, protobuf", op: "exportTraces", method: "POST", path: "/v1/traces", ctype: "application/x-protobuf",
			body: []byte{0x0a, 0x00}, auth: header("X-API-Key", apiKey), want: 200}, // one empty ResourceSpans
		{name: "ingest, API key", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: []byte("[" + event + "]"), auth: header("X-API-Key", apiKey), want: 202},
		{name: "ingest, one event rejected", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: []byte("[" + event + `,{"method_name":"Ping"}]`), auth: staff, want: 202, partial: true},
		{name: "ingest, every event rejected", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: []byte(`[{"method_name":"Ping"}]`), auth: staff, want: 400},
		{name: "ingest, Idempotency-Key", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: []byte("[" + event + "]"), auth: func(r *http.Request) {
				r.Header.Set("X-API-Key", apiKey)
				r.Header.Set("Idempotency-Key", "contract-1")
			}, want: 202},
		{name: "ingest, same Idempotency-Key, another body", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: []byte("[" + event + "," + event + "]"), auth: func(r *http.Request) {
				r.Header.Set("X-API-Key", apiKey)
				r.Header.Set("Idempotency-Key", "contract-1")
			}, want: 409},
		{name: "ingest, not an array", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: []byte(`{"service_name":"s"}`), auth: header("X-API-Key", apiKey), want: 400},
		{name: "ingest, over 8 MiB", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: append([]byte("["), bytes.Repeat([]byte(" "), 8<<20)...), auth: header("X-API-Key", apiKey), want: 413},
		{name: "ingest, no credentials", op: "ingestRequestLogs", method: "POST", path: "/api/grpc/monitor/ingest/", ctype: js,
			body: []byte("[" + event + "]"), want: 401},
		{name: "requests", op: "listGrpcRequests", method: "GET", path: "/api/grpc/monitor/requests/?status=success&page_size=5", auth: staff, want: 200,
			before: func() { waitForRequestLog(t, srv.base, staff) }},
		{name: "requests, bad status", op: "listGrpcRequests", method: "GET", path: "/api/grpc/monitor/requests/?page_size=0", auth: staff, want: 400},
		{name: "overview", op: "getGrpcOverview", method: "GET", path: "/api/grpc/monitor/overview/?hours=2", auth: staff, want: 200},
		{name: "overview, bad hours", op: "getGrpcOverview", method: "GET", path: "/api/grpc/monitor/overview/?hours=0", auth: staff, want: 400},
		{name: "services", op: "listGrpcServices", method: "GET", path: "/api/grpc/monitor/services/", auth: staff, want: 200},
		{name: "methods", op: "listGrpcMethods", method: "GET", path: "/api/grpc/monitor/methods/?service=cfgd.test.v1.Test", auth: staff, want: 200},
		{name: "timeline", op: "getGrpcTimeline", method: "GET", path: "/api/grpc/monitor/timeline/?hours=1", auth: staff, want: 200},
		{name: "timeline, bad hours", op: "getGrpcTimeline", method: "GET", path: "/api/grpc/monitor/timeline/?hours=721", auth: staff, want: 400},
		{name: "latency", op: "getGrpcLatency", method: "GET", path: "/api/grpc/monitor/latency/?hours=1&include_internal=true", auth: staff, want: 200},
		{name: "latency, bad hours", op: "getGrpcLatency", method: "GET", path: "/api/grpc/monitor/latency/?hours=721", auth: staff, want: 400},
		{name: "latency, not staff", op: "getGrpcLatency", method: "GET", path: "/api/grpc/monitor/latency/", auth: user, want: 403},
		{name: "callers", op: "listGrpcCallers", method: "GET", path: "/api/grpc/monitor/callers/?hours=1&limit=5", auth: staff, want: 200},
		{name: "callers, bad limit", op: "listGrpcCallers", method: "GET", path: "/api/grpc/monitor/callers/?limit=0", auth: staff, want: 400},
		{name: "status codes", op: "listGrpcStatusCodes", method: "GET", path: "/api/grpc/monitor/status-codes/?include_internal=true", auth: staff, want: 200},
		{name: "status codes, bad flag", op: "listGrpcStatusCodes", method: "GET", path: "/api/grpc/monitor/status-codes/?include_internal=maybe", auth: staff, want: 400},
		{name: "requests of the last hour", op: "listGrpcRequests", method: "GET", path: "/api/grpc/monitor/requests/?hours=1&include_internal=false", auth: staff, want: 200},
		{name: "one request", op: "getGrpcRequest", method: "GET", auth: staff, want: 200,
			pathOf: func() string {
				return fmt.Sprintf("/api/grpc/monitor/requests/%d/", firstRequestLogID(t, srv.base, staff))
			}},
		{name: "no such request", op: "getGrpcRequest", method: "GET", path: "/api/grpc/monitor/requests/999999999/", auth: staff, want: 404},
		{name: "request, bad id", op: "getGrpcRequest", method: "GET", path: "/api/grpc/monitor/requests/abc/", auth: staff, want: 400},
		{name: "monitor page", op: "getGrpcDashboard", method: "GET", path: "/admin/grpc/dashboard/", auth: staff, want: 200},
		{name: "monitor page, not staff", op: "getGrpcDashboard", method: "GET", path: "/admin/grpc/dashboard/", auth: user, want: 403},

		// Last: it fails delivery for every later code.
		{name: "code, e-mail down", op: "requestOtp", method: "POST", path: "/api/auth/otp/request/", ctype: js,
			body: []byte(fmt.Sprintf(`{"identifier":%q}`, authtest.Email("down"))), before: func() { mail.FailDelivery(true) }, want: 503},
	}
	for _, c := range calls {
		s.do(c)
	}
	for _, c := range s.errorCases() {
		s.do(c)
	}

	// Operations this test cannot call in-process, each with the reason.
	// Keep it empty: an operation listed here has no check that its
	// answers match the document.
	notExercised := map[string]string{}
	var ops []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			ops = append(ops, op.OperationID)
		}
	}
	slices.Sort(ops)
	for i, id := range ops {
		if id == "" || i > 0 && ops[i-1] == id {
			t.Errorf("operationId %q is empty or not unique", id)
		}
		_, skip := notExercised[id]
		switch {
		case s.called[id] == 0 && !skip:
			t.Errorf("operation %s is never called", id)
		case s.called[id] > 0 && skip:
			t.Errorf("operation %s is called but listed in notExercised", id)
		}
	}
	answers := 0
	for _, n := range s.called {
		answers += n
	}
	t.Logf("%d answers of %d operations checked against the served document", answers, len(ops))
	if len(ops) < 49 {
		t.Errorf("the served document has %d operations", len(ops))
	}
}
