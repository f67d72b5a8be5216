package auth_test

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands/app/signin"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/events/identity"
)

const (
	requestPath = "/api/auth/otp/request/"
	verifyPath  = "/api/auth/otp/verify/"
)

// wrong returns a well-formed code different from code.
func wrong(code string) string {
	n, _ := strconv.Atoi(code)
	return strconv.Itoa(100000 + (n+1)%900000)
}

func wantInvalidOTP(t *testing.T, r authtest.Response, what string) {
	t.Helper()
	if r.Status != http.StatusBadRequest || r.Str("code") != "invalid_otp" || r.Body["success"] != false {
		t.Fatalf("%s: want 400 invalid_otp, got %d %s", what, r.Status, r.Raw)
	}
}

func TestFourthRequestInAnHourIsRefused(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	email := authtest.Email("limit")
	for i := range 3 {
		e.RequestCode(t, email)
		e.Clock.Advance(10 * time.Minute) // requests at 0, 10, 20 minutes
		_ = i
	}
	// At 30 minutes: the fourth within the hour.
	r := e.Do(t, http.MethodPost, requestPath, map[string]string{"identifier": email})
	if r.Status != http.StatusTooManyRequests || r.Str("error") != "Too many requests" || r.Str("code") != "rate_limited" {
		t.Fatalf("4th request: %d %s", r.Status, r.Raw)
	}
	// The first request leaves the window at 60 minutes: 30 minutes from
	// now, less the real seconds the three requests took (the test clock
	// is real time plus the advances).
	if got, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || got > 30*60 || got < 30*60-10 {
		t.Fatalf("Retry-After %q, want %d (at most 10 s less)", r.Header.Get("Retry-After"), 30*60)
	}
	if n := e.Mail.Count(email); n != 3 {
		t.Fatalf("%d e-mails sent, want 3", n)
	}
	// A rolling hour: once the first request is an hour old, one more is allowed.
	e.Clock.Advance(30*time.Minute + time.Second)
	e.RequestCode(t, email)
	r = e.Do(t, http.MethodPost, requestPath, map[string]string{"identifier": email})
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("5th request: %d %s", r.Status, r.Raw)
	}
}

func TestParallelRequestsCannotExceedTheLimit(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	email := authtest.Email("burst")
	statuses := parallel(10, func(int) int {
		return e.Do(t, http.MethodPost, requestPath, map[string]string{"identifier": email}).Status
	})
	if ok := count(statuses, http.StatusOK); ok != 3 || count(statuses, http.StatusTooManyRequests) != 7 {
		t.Fatalf("statuses %v: want three 200 and seven 429", statuses)
	}
	if n := e.EventCount(t, identity.OTPStream(email), "otp.issued"); n != 3 {
		t.Fatalf("%d codes issued, want 3", n)
	}
}

func TestNewCodeReplacesThePreviousOne(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	email := authtest.Email("replace")
	first := e.RequestCode(t, email)
	second := e.RequestCode(t, email)
	if first == second {
		second = e.RequestCode(t, email) // one in a million; try once more
	}
	wantInvalidOTP(t, e.Verify(t, email, first), "the replaced code")
	if r := e.Verify(t, email, second); r.Status != http.StatusOK {
		t.Fatalf("the new code: %d %s", r.Status, r.Raw)
	}
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.FailureFloor = time.Millisecond }})
	t.Run("fourth attempt with the right code fails", func(t *testing.T) {
		email := authtest.Email("fourth")
		code := e.RequestCode(t, email)
		for i := range 3 {
			wantInvalidOTP(t, e.Verify(t, email, wrong(code)), "wrong guess "+strconv.Itoa(i+1))
		}
		wantInvalidOTP(t, e.Verify(t, email, code), "right code on the 4th attempt")
	})
	t.Run("third attempt with the right code succeeds", func(t *testing.T) {
		email := authtest.Email("third")
		code := e.RequestCode(t, email)
		for range 2 {
			wantInvalidOTP(t, e.Verify(t, email, wrong(code)), "wrong guess")
		}
		if r := e.Verify(t, email, code); r.Status != http.StatusOK {
			t.Fatalf("right code on the 3rd attempt: %d %s", r.Status, r.Raw)
		}
	})
	t.Run("a new code gets fresh attempts", func(t *testing.T) {
		email := authtest.Email("fresh")
		code := e.RequestCode(t, email)
		for range 3 {
			wantInvalidOTP(t, e.Verify(t, email, wrong(code)), "wrong guess")
		}
		code = e.RequestCode(t, email)
		if r := e.Verify(t, email, code); r.Status != http.StatusOK {
			t.Fatalf("new code: %d %s", r.Status, r.Raw)
		}
	})
}

func TestTwentyParallelWrongGuesses(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.FailureFloor = time.Millisecond }})
	email := authtest.Email("spray")
	code := e.RequestCode(t, email)
	// Twenty different wrong codes, all sent at once.
	statuses := parallel(20, func(i int) int {
		guess := strconv.Itoa(100000 + i)
		if guess == code {
			guess = "999999"
		}
		return e.Verify(t, email, guess).Status
	})
	if count(statuses, http.StatusBadRequest) != 20 {
		t.Fatalf("statuses %v: want twenty 400", statuses)
	}
	if n := e.EventCount(t, identity.OTPStream(email), "otp.attempted"); n != 3 {
		t.Fatalf("%d attempts counted, want exactly 3", n)
	}
	wantInvalidOTP(t, e.Verify(t, email, code), "the right code after the attempts ran out")
}

func TestParallelRightGuessesExactlyOneWins(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.FailureFloor = time.Millisecond }})
	for _, n := range []int{2, 3} {
		email := authtest.Email("race")
		code := e.RequestCode(t, email)
		statuses := parallel(n, func(int) int { return e.Verify(t, email, code).Status })
		if count(statuses, http.StatusOK) != 1 || count(statuses, http.StatusBadRequest) != n-1 {
			t.Fatalf("%d parallel right guesses: %v, want exactly one 200", n, statuses)
		}
		if got := e.EventCount(t, identity.OTPStream(email), "otp.verified"); got != 1 {
			t.Fatalf("%d verifications stored", got)
		}
		if got := e.EventCount(t, identity.EmailStream(email), "user.email_claimed"); got != 1 {
			t.Fatalf("%d users created", got)
		}
	}
}

func TestCodeExpiresAt300Seconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		age    time.Duration
		wantOK bool
	}{
		{299*time.Second + 900*time.Millisecond, true},
		{300 * time.Second, false},
		{time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.age.String(), func(t *testing.T) {
			t.Parallel()
			e := authtest.Start(t, authtest.Options{NoPipeline: true})
			e.Clock.Stop()
			email := authtest.Email("expiry")
			code := e.RequestCode(t, email)
			e.Clock.Advance(tc.age)
			r := e.Verify(t, email, code)
			if tc.wantOK && r.Status != http.StatusOK {
				t.Fatalf("at %s: %d %s", tc.age, r.Status, r.Raw)
			}
			if !tc.wantOK {
				wantInvalidOTP(t, r, "expired code")
			}
		})
	}
}

func TestCodeIsSingleUse(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	email := authtest.Email("reuse")
	code := e.RequestCode(t, email)
	if r := e.Verify(t, email, code); r.Status != http.StatusOK {
		t.Fatalf("first use: %d %s", r.Status, r.Raw)
	}
	wantInvalidOTP(t, e.Verify(t, email, code), "second use")
}

func TestSecondSignInFindsTheSameUser(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	email := authtest.Email("again")
	a := e.SignIn(t, email)
	b := e.SignIn(t, strings.ToUpper(email))
	if a.UserID != b.UserID {
		t.Fatalf("user ids %d and %d for one address", a.UserID, b.UserID)
	}
}

// Every invalid-code case answers the same bytes, in about the same time,
// whatever the account's state: nothing to enumerate.
func TestInvalidCodeAnswersAreIndistinguishable(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.IPRequests, c.IPVerifications = 1000, 1000 }})
	const rounds = 5
	type kase struct {
		name  string
		setup func(t *testing.T) (email, code string)
	}
	cases := []kase{
		{"unknown address", func(t *testing.T) (string, string) { return authtest.Email("nobody"), "123456" }},
		{"wrong code", func(t *testing.T) (string, string) {
			email := authtest.Email("wrong")
			return email, wrong(e.RequestCode(t, email))
		}},
		{"used code", func(t *testing.T) (string, string) {
			email := authtest.Email("used")
			code := e.RequestCode(t, email)
			e.Verify(t, email, code)
			return email, code
		}},
		{"exhausted code", func(t *testing.T) (string, string) {
			email := authtest.Email("exhausted")
			code := e.RequestCode(t, email)
			for range 3 {
				e.Verify(t, email, wrong(code))
			}
			return email, code
		}},
		{"expired code of a known user", func(t *testing.T) (string, string) {
			email := authtest.Email("expired")
			e.SignIn(t, email)
			code := e.RequestCode(t, email)
			e.Clock.Advance(301 * time.Second)
			return email, code
		}},
	}
	// The cases alternate within each round, so that the machine's drift
	// (tens of percent within minutes) weighs on every case alike.
	bodies := make([][]byte, len(cases))
	took := make([][]time.Duration, len(cases))
	for range rounds {
		for k, c := range cases {
			email, code := c.setup(t)
			r := e.Verify(t, email, code)
			wantInvalidOTP(t, r, c.name)
			if bodies[k] == nil {
				bodies[k] = r.Raw
			}
			took[k] = append(took[k], r.Took)
		}
	}
	var medians []time.Duration
	for _, ts := range took {
		slices.Sort(ts)
		medians = append(medians, ts[len(ts)/2])
	}
	for i := range bodies {
		if !bytes.Equal(bodies[i], bodies[0]) {
			t.Fatalf("%s answers %s, %s answers %s", cases[i].name, bodies[i], cases[0].name, bodies[0])
		}
	}
	lo, hi := slices.Min(medians), slices.Max(medians)
	t.Logf("median answer times: %v", medians)
	if hi-lo > 20*time.Millisecond || lo < auth0Floor {
		t.Fatalf("median answer times differ too much: %v (cases %v)", medians, names(cases, func(k kase) string { return k.name }))
	}
}

// auth0Floor is the lower bound every invalid answer must take.
const auth0Floor = 35 * time.Millisecond

func TestUndeliveredCodeIsVoid(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	email := authtest.Email("undelivered")
	e.Mail.FailDelivery(true)
	r := e.Do(t, http.MethodPost, requestPath, map[string]string{"identifier": email})
	if r.Status != http.StatusServiceUnavailable || r.Str("code") != "delivery_failed" || !strings.Contains(r.Str("error"), "could not be sent") {
		t.Fatalf("request while mail is down: %d %s", r.Status, r.Raw)
	}
	rejected := e.Mail.Rejected()
	if len(rejected) != 1 || rejected[0].Code() == "" {
		t.Fatalf("rejected messages: %+v", rejected)
	}
	e.Mail.FailDelivery(false)
	// The code that reached the (failing) server can never be used.
	wantInvalidOTP(t, e.Verify(t, email, rejected[0].Code()), "the undelivered code")
	if n := e.EventCount(t, identity.OTPStream(email), "otp.delivery_failed"); n != 1 {
		t.Fatalf("%d delivery failures stored", n)
	}
	// Delivery works again: a new code signs in.
	e.SignIn(t, email)
}

func TestSMTPServerDownIs503(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) {
		c.Email.SMTPHost, c.Email.SMTPPort, c.Email.SMTPTimeout = "127.0.0.1", 1, 2*time.Second
	}})
	r := e.Do(t, http.MethodPost, requestPath, map[string]string{"identifier": authtest.Email("down")})
	if r.Status != http.StatusServiceUnavailable || r.Str("code") != "delivery_failed" {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
}

func TestPerIPThrottle(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) {
		c.FailureFloor, c.IPRequests, c.IPVerifications, c.IPWindow = time.Millisecond, 3, 4, time.Hour
	}})
	var last string
	for range 3 {
		last = authtest.Email("ip")
		e.RequestCode(t, last)
	}
	r := e.Do(t, http.MethodPost, requestPath, map[string]string{"identifier": authtest.Email("ip")})
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("4th address from one IP: %d %s", r.Status, r.Raw)
	}
	for range 4 {
		wantInvalidOTP(t, e.Verify(t, authtest.Email("other"), "123456"), "verify within the IP limit")
	}
	if r := e.Verify(t, last, "123456"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("5th verify from one IP: %d %s", r.Status, r.Raw)
	}
}

func TestBadInputIs400(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	tests := []struct {
		path, body string
		field      string // expected field error; "" for a body error
		msg        string
	}{
		{requestPath, `{"identifier": ""}`, "identifier", "Email is required"},
		{requestPath, `{"identifier": "not-an-address"}`, "identifier", "enter a valid e-mail address"},
		{requestPath, `{"identifier": "Ann <ann@example.com>"}`, "identifier", "enter a valid e-mail address"},
		{requestPath, `{"identifier": "a@example.com", "channel": "sms"}`, "channel", "only the email channel is supported"},
		{requestPath, `{"identifier": "a@example.com", "source_url": "javascript:alert(1)"}`, "source_url", "source_url must be an http(s) URL or a path starting with /"},
		{requestPath, `{"identifier": "a@example.com", "extra": 1}`, "", `unknown field "extra"`},
		{requestPath, `{"identifier": 7}`, "", `field "identifier" must be of type string`},
		{requestPath, `not json`, "", "request body is not valid JSON"},
		{requestPath, ``, "", "request body is empty"},
		{verifyPath, `{"identifier": "a@example.com", "otp_code": "12345"}`, "otp_code", "must be 6 digits"},
		{verifyPath, `{"identifier": "a@example.com", "otp_code": "12345a"}`, "otp_code", "must be 6 digits"},
		{verifyPath, `{"identifier": "a@example.com", "otp_code": "١٢٣٤٥٦"}`, "otp_code", "must be 6 digits"},
		{verifyPath, `{"otp_code": "123456"}`, "identifier", "Email is required"},
		{verifyPath, `{"identifier": "a@example.com", "otp_code": "123456", "source_url": "ftp://x"}`, "source_url", "source_url must be an http(s) URL or a path starting with /"},
		{"/api/auth/token/refresh/", `{}`, "refresh", "this field is required"},
		{"/api/auth/logout/", `{"refresh": ""}`, "refresh", "this field is required"},
		{"/api/auth/login/", `{"email": "", "password": "x"}`, "email", "Email is required"},
		// Look-alike addresses (issue 9.10).
		{requestPath, `{"identifier": "norm\u200b5@example.com"}`, "identifier", "enter a valid e-mail address: " + identity.ErrHiddenCharacter.Error() + " (found U+200B)"},
		{requestPath, `{"identifier": "\u202enorm5@example.com"}`, "identifier", "enter a valid e-mail address: " + identity.ErrHiddenCharacter.Error() + " (found U+202E)"},
		{requestPath, `{"identifier": "norm\u00a05@example.com"}`, "identifier", "enter a valid e-mail address: " + identity.ErrHiddenCharacter.Error() + " (found U+00A0)"},
		{requestPath, `{"identifier": "n\u043erm5@example.com"}`, "identifier", "enter a valid e-mail address: " + identity.ErrMixedScript.Error()},
		{verifyPath, `{"identifier": "norm5\ufeff@example.com", "otp_code": "123456"}`, "identifier", "enter a valid e-mail address: " + identity.ErrHiddenCharacter.Error() + " (found U+FEFF)"},
		{"/api/auth/login/", `{"email": "adm\u200bin@example.com", "password": "x"}`, "email", "enter a valid e-mail address: " + identity.ErrHiddenCharacter.Error() + " (found U+200B)"},
		{"/api/auth/login/", `{"email": "\u0430dmin@example.com", "password": "x"}`, "email", "enter a valid e-mail address: " + identity.ErrMixedScript.Error()},
		// source_url (issue 9.12).
		{requestPath, `{"identifier": "a@example.com", "source_url": "/\\evil.example/"}`, "source_url", "source_url must be an http(s) URL or a path starting with /"},
		{requestPath, `{"identifier": "a@example.com", "source_url": "https://user:pass@example.com/"}`, "source_url", "source_url must be an http(s) URL or a path starting with /"},
		{verifyPath, `{"identifier": "a@example.com", "otp_code": "123456", "source_url": "file:///etc/passwd"}`, "source_url", "source_url must be an http(s) URL or a path starting with /"},
		// Strict JSON (issue 9.11).
		{requestPath, `{"identifier": "a@example.com", "identifier": "b@example.com"}`, "", `duplicate key "identifier"`},
		{requestPath, `{"Identifier": "a@example.com"}`, "", `unknown field "Identifier" (field names are case-sensitive: did you mean "identifier"?)`},
		{verifyPath, "{\"identifier\": \"a\xff@example.com\", \"otp_code\": \"123456\"}", "", "request body is not valid UTF-8"},
		{"/api/auth/token/refresh/", `{"refresh": "x", "REFRESH": "y"}`, "", `unknown field "REFRESH" (field names are case-sensitive: did you mean "refresh"?)`},
	}
	for _, tc := range tests {
		r := e.Do(t, http.MethodPost, tc.path, tc.body)
		if r.Status != http.StatusBadRequest || r.Body["success"] != false {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, r.Status, r.Raw)
			continue
		}
		got := r.Str("error")
		if tc.field != "" {
			got = r.Field(tc.field)
		}
		if got != tc.msg {
			t.Errorf("%s %s: got %q, want %q (%s)", tc.path, tc.body, got, tc.msg, r.Raw)
		}
	}
	if r := e.Do(t, http.MethodGet, requestPath, nil); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d", requestPath, r.Status)
	}
	for _, ct := range []string{"text/plain", "application/json-evil", "application/x-www-form-urlencoded", "application/json; charset=latin1"} {
		for _, path := range []string{requestPath, verifyPath, "/api/auth/token/refresh/", "/api/auth/login/"} {
			if r := e.Do(t, http.MethodPost, path, `{"identifier":"a@example.com"}`, "Content-Type", ct); r.Status != http.StatusUnsupportedMediaType || r.Body["success"] != false {
				t.Errorf("%s with %s: %d %s, want 415", path, ct, r.Status, r.Raw)
			}
		}
	}
	if r := e.Do(t, http.MethodPost, requestPath, `{"identifier":"a@example.com"}`, "Content-Type", "application/json; charset=utf-8"); r.Status != http.StatusOK {
		t.Errorf("application/json; charset=utf-8: %d %s", r.Status, r.Raw)
	}
}

// TestLookAlikeAddressesAreOneAccount: a fullwidth spelling of an address,
// and one padded with no-break spaces, sign in to the account of the plain
// address instead of creating another.
func TestLookAlikeAddressesAreOneAccount(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.FailureFloor = time.Millisecond }})
	email := authtest.Email("norm")
	first := e.SignIn(t, email)
	local, domain, _ := strings.Cut(email, "@")
	fullwidth := strings.Map(func(r rune) rune {
		if r >= '!' && r <= '~' {
			return r - '!' + '\uff01'
		}
		return r
	}, strings.ToUpper(local)) + "\uff20" + domain
	for _, alike := range []string{fullwidth, "\u00a0" + email + "\u3000"} {
		if r := e.Do(t, http.MethodPost, requestPath, map[string]string{"identifier": alike}); r.Status != http.StatusOK {
			t.Fatalf("request for %+q: %d %s", alike, r.Status, r.Raw)
		}
		m, ok := e.Mail.Last(email)
		if !ok {
			t.Fatalf("the code for %+q was not sent to %s", alike, email)
		}
		r := e.Verify(t, alike, m.Code())
		if r.Status != http.StatusOK || int64(r.Obj("user")["id"].(float64)) != first.UserID || r.Obj("user")["email"] != email {
			t.Fatalf("verify as %+q: %d %s, want user %d", alike, r.Status, r.Raw, first.UserID)
		}
	}
	if n := e.EventCount(t, identity.EmailStream(email), "user.email_claimed"); n != 1 {
		t.Fatalf("%d claims of %s", n, email)
	}
}

func parallel(n int, f func(i int) int) []int {
	out := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return out
}

func count(xs []int, v int) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

func names[T any](xs []T, f func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}
