package extensions

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/deploy/config"
)

func own[T any](t *testing.T, s *Set, name string) T {
	t.Helper()
	v, ok := s.Settings(name)
	if !ok {
		t.Fatalf("extension %s is not on", name)
	}
	got, ok := v.(T)
	if !ok {
		t.Fatalf("extension %s settings are %T", name, v)
	}
	return got
}

func base(t *testing.T, s *Set, name string) AppSettings {
	t.Helper()
	e := s.find(name)
	if e == nil || !e.enabled {
		t.Fatalf("extension %s is not on", name)
	}
	return e.app
}

// TestPrecedence pins process env > .env > default for every kind of value
// the extensions read.
func TestPrecedence(t *testing.T) {
	type value struct {
		name string
		def  any // nil: the variable is required, there is no default
		dot  string
		env  string
		get  func(*testing.T, *Set) any
	}
	values := []value{
		{"PAYMENTS_API_KEYS__CRYPTO_API_KEY", "", "dot-key", "env-key",
			func(t *testing.T, s *Set) any { return own[Payments](t, s, "payments").CryptoAPIKey.Reveal() }},
		{"PAYMENTS_API_KEYS__CRYPTO_WEBHOOK_SECRET", "", "dot-wh", "env-wh",
			func(t *testing.T, s *Set) any { return own[Payments](t, s, "payments").CryptoWebhookSecret.Reveal() }},
		{"TELEGRAM__BOT_TOKEN", nil, "dot-token", "env-token",
			func(t *testing.T, s *Set) any { return own[Leads](t, s, "leads").TelegramBotToken.Reveal() }},
		{"LEADS__NOTIFICATION_EMAIL", nil, "dot@example.com", "env@example.com",
			func(t *testing.T, s *Set) any { return own[Leads](t, s, "leads").NotificationEmail }},
		{"LEADS__TELEGRAM_ENABLED", true, "false", "true",
			func(t *testing.T, s *Set) any { return own[Leads](t, s, "leads").TelegramEnabled }},
		{"LEADS__EMAIL_ENABLED", true, "0", "yes",
			func(t *testing.T, s *Set) any { return own[Leads](t, s, "leads").EmailEnabled }},
		{"SUPPORT__TICKET_AUTO_ASSIGN", true, "off", "on",
			func(t *testing.T, s *Set) any { return own[Support](t, s, "support").TicketAutoAssign }},
		{"SUPPORT__SLA_TRACKING_ENABLED", true, "false", "true",
			func(t *testing.T, s *Set) any { return own[Support](t, s, "support").SLATrackingEnabled }},
		{"SUPPORT__SLA_HOURS", 24, "48", "72",
			func(t *testing.T, s *Set) any { return own[Support](t, s, "support").SLAHours }},
		{"SUPPORT__LIVE_CHAT_ENABLED", false, "true", "false",
			func(t *testing.T, s *Set) any { return own[Support](t, s, "support").LiveChatEnabled }},
		{"SUPPORT__KNOWLEDGE_BASE_INTEGRATION", true, "false", "true",
			func(t *testing.T, s *Set) any { return own[Support](t, s, "support").KnowledgeBaseIntegration }},
		{"NEWSLETTER__FROM_EMAIL", nil, "dot@example.com", "env@example.com",
			func(t *testing.T, s *Set) any { return own[Newsletter](t, s, "newsletter").FromEmail }},
		{"NEWSLETTER__FROM_NAME", nil, "Dot News", "Env News",
			func(t *testing.T, s *Set) any { return own[Newsletter](t, s, "newsletter").FromName }},
		{"NEWSLETTER__DOUBLE_OPT_IN", true, "false", "true",
			func(t *testing.T, s *Set) any { return own[Newsletter](t, s, "newsletter").DoubleOptIn }},
		{"NEWSLETTER__UNSUBSCRIBE_LINK_REQUIRED", true, "false", "true",
			func(t *testing.T, s *Set) any { return own[Newsletter](t, s, "newsletter").UnsubscribeLinkRequired }},
		{"PAYMENTS__ADMIN_ENABLED", true, "false", "true",
			func(t *testing.T, s *Set) any { return base(t, s, "payments").AdminEnabled }},
		{"SUPPORT__MIDDLEWARE_CLASSES", "", "audit, cors", "cors",
			func(t *testing.T, s *Set) any { return strings.Join(base(t, s, "support").MiddlewareClasses, "|") }},
		{"LEADS__URL_PREFIX", "", "dot-leads", "env-leads",
			func(t *testing.T, s *Set) any { return base(t, s, "leads").URLPrefix }},
		{"NEWSLETTER__URL_NAMESPACE", "", "dotns", "envns",
			func(t *testing.T, s *Set) any { return base(t, s, "newsletter").URLNamespace }},
		{"CACHE__ENABLED", true, "false", "true",
			func(t *testing.T, s *Set) any { return s.Enabled("cache") }},
		{"EXTENSIONS__ENABLED", false, "demo", "payments,demo",
			func(t *testing.T, s *Set) any { return s.Enabled("demo") }},
	}
	want := func(v value, s string) any {
		switch v.def.(type) {
		case bool:
			return map[string]bool{"true": true, "yes": true, "on": true, "demo": true, "payments,demo": true}[s]
		case int:
			n := 0
			for _, c := range s {
				n = n*10 + int(c-'0')
			}
			return n
		}
		if v.name == "SUPPORT__MIDDLEWARE_CLASSES" {
			return strings.ReplaceAll(strings.ReplaceAll(s, " ", ""), ",", "|")
		}
		return s
	}
	for _, v := range values {
		// Required values live in the process env unless they are the one
		// under test, so that each case isolates one variable.
		baseEnv := allOn()
		if v.name == "EXTENSIONS__ENABLED" {
			baseEnv = with(baseEnv, v.name, "-")
		}
		cases := []struct {
			layer       string
			env, dotenv map[string]string
			want        any
		}{
			{"dotenv", with(baseEnv, v.name, "-"), map[string]string{v.name: v.dot}, want(v, v.dot)},
			{"env over dotenv", with(baseEnv, v.name, v.env), map[string]string{v.name: v.dot}, want(v, v.env)},
		}
		if v.def != nil {
			cases = append(cases, struct {
				layer       string
				env, dotenv map[string]string
				want        any
			}{"default", with(baseEnv, v.name, "-"), nil, v.def})
		}
		for _, tc := range cases {
			t.Run(v.name+"/"+tc.layer, func(t *testing.T) {
				s, err := load(t, tc.env, tc.dotenv, plus(demo(), cache()))
				if err != nil {
					t.Fatalf("settings problems: %v", err)
				}
				if got := v.get(t, s); got != tc.want {
					t.Fatalf("got %#v, want %#v", got, tc.want)
				}
			})
		}
	}
}

func TestDefaults(t *testing.T) {
	s := mustLoad(t, allOn(), Builtin())
	if got, want := own[Leads](t, s, "leads"), (Leads{TelegramEnabled: true, EmailEnabled: true, TelegramBotToken: config.NewSecret(botToken), NotificationEmail: "leads@example.com"}); got != want {
		t.Errorf("leads: got %+v, want %+v", got, want)
	}
	if got, want := own[Support](t, s, "support"), (Support{TicketAutoAssign: true, SLATrackingEnabled: true, SLAHours: 24, LiveChatEnabled: false, KnowledgeBaseIntegration: true}); got != want {
		t.Errorf("support: got %+v, want %+v", got, want)
	}
	if got, want := own[Newsletter](t, s, "newsletter"), (Newsletter{FromEmail: "news@example.com", FromName: "Acme News", DoubleOptIn: true, UnsubscribeLinkRequired: true}); got != want {
		t.Errorf("newsletter: got %+v, want %+v", got, want)
	}
	if got, want := base(t, s, "payments"), (AppSettings{AdminEnabled: true, MiddlewareClasses: []string{}}); !reflect.DeepEqual(got, want) {
		t.Errorf("payments base: got %+v, want %+v", got, want)
	}
	// Nothing is on unless asked for.
	s = mustLoad(t, nil, plus(demo()))
	for _, name := range []string{"payments", "leads", "support", "newsletter", "demo"} {
		if s.Enabled(name) {
			t.Errorf("%s is on by default", name)
		}
	}
}

// TestValidation covers every rule: each bad value stops start-up with one
// line naming the variable.
func TestValidation(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // the exact error lines, in order
	}{
		{"all fine", allOn(), nil},
		{"disabled extensions ask for nothing", map[string]string{"SUPPORT__SLA_HOURS": "0", "PAYMENTS__URL_PREFIX": "Bad/Prefix"}, nil},
		{"unknown extension", with(allOn(), "EXTENSIONS__ENABLED", "payments,billing"),
			[]string{`EXTENSIONS__ENABLED: expected a comma-separated list of app extensions from: payments, leads, support, newsletter, demo, got "billing"`}},
		{"module named as app", with(allOn(), "EXTENSIONS__ENABLED", "cache"),
			[]string{`EXTENSIONS__ENABLED: expected app extensions only; module extension cache is turned on or off with CACHE__ENABLED, got "cache"`}},
		{"names are case-insensitive", with(allOn(), "EXTENSIONS__ENABLED", " Payments , LEADS,,payments"), nil},
		{"leads token missing", with(allOn(), "TELEGRAM__BOT_TOKEN", "-"), []string{`TELEGRAM__BOT_TOKEN: required: a secret value`}},
		{"leads token blank", with(allOn(), "TELEGRAM__BOT_TOKEN", "  "), []string{`TELEGRAM__BOT_TOKEN: required: a secret value`}},
		{"leads token required even with telegram off", with(allOn(), "TELEGRAM__BOT_TOKEN", "-", "LEADS__TELEGRAM_ENABLED", "false"),
			[]string{`TELEGRAM__BOT_TOKEN: required: a secret value`}},
		{"leads email missing", with(allOn(), "LEADS__NOTIFICATION_EMAIL", "-"), []string{`LEADS__NOTIFICATION_EMAIL: required: an e-mail address`}},
		{"leads email malformed", with(allOn(), "LEADS__NOTIFICATION_EMAIL", "leads-at-example"),
			[]string{`LEADS__NOTIFICATION_EMAIL: expected an e-mail address such as team@example.com, got "leads-at-example"`}},
		{"leads email with display name", with(allOn(), "LEADS__NOTIFICATION_EMAIL", "Leads <leads@example.com>"),
			[]string{`LEADS__NOTIFICATION_EMAIL: expected an e-mail address such as team@example.com, got "Leads <leads@example.com>"`}},
		{"leads bool", with(allOn(), "LEADS__EMAIL_ENABLED", "sometimes"), []string{`LEADS__EMAIL_ENABLED: expected true or false, got "sometimes"`}},
		{"newsletter from email missing", with(allOn(), "NEWSLETTER__FROM_EMAIL", "-"), []string{`NEWSLETTER__FROM_EMAIL: required: an e-mail address`}},
		{"newsletter from email malformed", with(allOn(), "NEWSLETTER__FROM_EMAIL", "news@"),
			[]string{`NEWSLETTER__FROM_EMAIL: expected an e-mail address such as team@example.com, got "news@"`}},
		{"newsletter from name missing", with(allOn(), "NEWSLETTER__FROM_NAME", "-"), []string{`NEWSLETTER__FROM_NAME: required: a sender name such as Acme News`}},
		{"newsletter bool", with(allOn(), "NEWSLETTER__DOUBLE_OPT_IN", "2"), []string{`NEWSLETTER__DOUBLE_OPT_IN: expected true or false, got "2"`}},
		{"sla hours lowest", with(allOn(), "SUPPORT__SLA_HOURS", "1"), nil},
		{"sla hours highest", with(allOn(), "SUPPORT__SLA_HOURS", "168"), nil},
		{"sla hours zero", with(allOn(), "SUPPORT__SLA_HOURS", "0"), []string{`SUPPORT__SLA_HOURS: expected an integer from 1 to 168, got "0"`}},
		{"sla hours too many", with(allOn(), "SUPPORT__SLA_HOURS", "169"), []string{`SUPPORT__SLA_HOURS: expected an integer from 1 to 168, got "169"`}},
		{"sla hours negative", with(allOn(), "SUPPORT__SLA_HOURS", "-5"), []string{`SUPPORT__SLA_HOURS: expected an integer from 1 to 168, got "-5"`}},
		{"sla hours not a number", with(allOn(), "SUPPORT__SLA_HOURS", "24h"), []string{`SUPPORT__SLA_HOURS: expected an integer from 1 to 168, got "24h"`}},
		{"support bool", with(allOn(), "SUPPORT__LIVE_CHAT_ENABLED", "maybe"), []string{`SUPPORT__LIVE_CHAT_ENABLED: expected true or false, got "maybe"`}},
		{"admin enabled bool", with(allOn(), "PAYMENTS__ADMIN_ENABLED", "nah"), []string{`PAYMENTS__ADMIN_ENABLED: expected true or false, got "nah"`}},
		{"prefix with slash", with(allOn(), "PAYMENTS__URL_PREFIX", "pay/ments"),
			[]string{`PAYMENTS__URL_PREFIX: expected one path segment of a-z, 0-9, '-' and '_', at most 64 characters, got "pay/ments"`}},
		{"prefix upper case", with(allOn(), "PAYMENTS__URL_PREFIX", "Pay"),
			[]string{`PAYMENTS__URL_PREFIX: expected one path segment of a-z, 0-9, '-' and '_', at most 64 characters, got "Pay"`}},
		{"prefix dot dot", with(allOn(), "PAYMENTS__URL_PREFIX", ".."),
			[]string{`PAYMENTS__URL_PREFIX: expected one path segment of a-z, 0-9, '-' and '_', at most 64 characters, got ".."`}},
		{"prefix too long", with(allOn(), "PAYMENTS__URL_PREFIX", strings.Repeat("p", 65)),
			[]string{`PAYMENTS__URL_PREFIX: expected one path segment of a-z, 0-9, '-' and '_', at most 64 characters, got "` + strings.Repeat("p", 65) + `"`}},
		{"prefix fine", with(allOn(), "PAYMENTS__URL_PREFIX", "pay_2-go"), nil},
		{"prefix takes another's name", with(allOn(), "PAYMENTS__URL_PREFIX", "leads"),
			[]string{`PAYMENTS__URL_PREFIX: expected a URL prefix no other extension uses (leads uses it), got "leads"`}},
		{"prefix takes a disabled extension's name", with(allOn(), "EXTENSIONS__ENABLED", "payments", "PAYMENTS__URL_PREFIX", "leads"), nil},
		{"two prefixes alike", with(allOn(), "PAYMENTS__URL_PREFIX", "shop", "SUPPORT__URL_PREFIX", "shop"),
			[]string{`SUPPORT__URL_PREFIX: expected a URL prefix no other extension uses (payments uses it), got "shop"`}},
		{"prefix reserved extensions", with(allOn(), "LEADS__URL_PREFIX", "extensions"),
			[]string{`LEADS__URL_PREFIX: expected a URL prefix other than /cfg/extensions/, which cfgd keeps for itself, got "extensions"`}},
		{"prefix reserved grpc", with(allOn(), "LEADS__URL_PREFIX", "grpc"),
			[]string{`LEADS__URL_PREFIX: expected a URL prefix other than /cfg/grpc/, which cfgd keeps for itself, got "grpc"`}},
		{"namespace malformed", with(allOn(), "LEADS__URL_NAMESPACE", "leads:v2"),
			[]string{`LEADS__URL_NAMESPACE: expected one path segment of a-z, 0-9, '-' and '_', at most 64 characters, got "leads:v2"`}},
		{"namespace clash", with(allOn(), "LEADS__URL_NAMESPACE", "support"),
			[]string{`LEADS__URL_NAMESPACE: expected a URL namespace no other extension uses (support uses it), got "support"`}},
		{"middleware twice", with(allOn(), "LEADS__MIDDLEWARE_CLASSES", "audit,cors,audit"),
			[]string{`LEADS__MIDDLEWARE_CLASSES: expected each middleware once, got "audit"`}},
		{"module enabled bool", with(allOn(), "CACHE__ENABLED", "enabled"), []string{`CACHE__ENABLED: expected true or false, got "enabled"`}},
		{"module own settings checked when on", with(allOn(), "CACHE__SIZE", "0"), []string{`CACHE__SIZE: expected an integer from 1 to 1000, got "0"`}},
		{"module own settings ignored when off", with(allOn(), "CACHE__ENABLED", "false", "CACHE__SIZE", "0"), nil},
		{"every problem on its own line", with(allOn(), "TELEGRAM__BOT_TOKEN", "-", "SUPPORT__SLA_HOURS", "500", "NEWSLETTER__FROM_EMAIL", "x"),
			[]string{
				`TELEGRAM__BOT_TOKEN: required: a secret value`,
				`SUPPORT__SLA_HOURS: expected an integer from 1 to 168, got "500"`,
				`NEWSLETTER__FROM_EMAIL: expected an e-mail address such as team@example.com, got "x"`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The same value from .env must give the same verdict.
			for _, layer := range []string{"env", "dotenv"} {
				env, dot := tc.env, map[string]string(nil)
				if layer == "dotenv" {
					env, dot = nil, tc.env
				}
				s, err := load(t, env, dot, plus(demo(), cache()))
				var got []string
				if err != nil {
					got = strings.Split(err.Error(), "\n")
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("%s: got lines\n%s\nwant\n%s", layer, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
				}
				if err != nil {
					assertNoSecret(t, "settings error", err.Error())
					if mountErr := s.Mount(mux.NewRouter(), nil, fakeStaff); mountErr == nil {
						t.Fatalf("%s: a Set with settings problems mounted", layer)
					}
				}
			}
		})
	}
}

// TestLoadKeepsCallerProblems checks that Load adds to the reader's problems
// and that earlier ones alone do not stop the Set from mounting.
func TestLoadKeepsCallerProblems(t *testing.T) {
	r := config.NewReader(config.FromMaps(with(allOn(), "HTTP__ADDR", "nope"), nil))
	r.Fail("HTTP__ADDR", "expected host:port", "nope")
	s, err := Load(r, Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Err().Error(); got != `HTTP__ADDR: expected host:port, got "nope"` {
		t.Fatalf("reader problems: %q", got)
	}
	if err := s.Mount(mux.NewRouter(), nil, fakeStaff); err != nil {
		t.Fatalf("extension settings are fine, Mount refused: %v", err)
	}
}

func TestInstalledErrors(t *testing.T) {
	tests := []struct {
		name string
		ext  []Extension
		want string
	}{
		{"bad name", []Extension{{Name: "Pay Ments"}}, `name must be one path segment`},
		{"empty name", []Extension{{Name: ""}}, `name must be one path segment`},
		{"installed twice", []Extension{{Name: "a"}, {Name: "a"}}, `installed twice`},
		{"same variable prefix", []Extension{{Name: "a-b"}, {Name: "a_b"}}, `share the prefix A_B__`},
		{"module with routes", []Extension{{Name: "m", Kind: Module, Routes: func(any) []Group { return nil }}}, `a module extension has no routes`},
		{"module with navigation", []Extension{{Name: "m", Kind: Module, Navigation: &Navigation{Title: "M"}}}, `only the enabled setting`},
		{"unknown kind", []Extension{{Name: "k", Kind: Kind(7)}}, `unknown kind 7`},
		{"navigation without title", []Extension{{Name: "n", Navigation: &Navigation{}}}, `navigation needs a title`},
		{"constance twice", []Extension{{Name: "c", ConstanceFields: []ConstanceField{{Name: "X"}, {Name: "X"}}}}, `constance field names`},
		{"bad cron", []Extension{{Name: "c", Schedules: []Schedule{{Name: "s", Task: "t", Cron: "daily"}}}}, `five-field cron`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(config.NewReader(config.FromMaps(nil, nil)), tc.ext)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestOwnSettingsMustNotHideBase(t *testing.T) {
	ext := Extension{Name: "x", Settings: func(Vars) any {
		return map[string]bool{"admin_enabled": false}
	}}
	r := config.NewReader(config.FromMaps(map[string]string{"EXTENSIONS__ENABLED": "x"}, nil))
	if _, err := Load(r, []Extension{ext}); err == nil || !strings.Contains(err.Error(), `hides a base setting`) {
		t.Fatalf("got %v", err)
	}
	ext.Settings = func(Vars) any { return 42 }
	r = config.NewReader(config.FromMaps(map[string]string{"EXTENSIONS__ENABLED": "x"}, nil))
	if _, err := Load(r, []Extension{ext}); err == nil || !strings.Contains(err.Error(), `JSON object`) {
		t.Fatalf("got %v", err)
	}
}
