package extensions

import "github.com/cfgd/cfgd/deploy/config"

// Versions of the built-in extensions, shown by their API roots.
const (
	PaymentsVersion   = "1.0.0"
	LeadsVersion      = "1.0.0"
	SupportVersion    = "1.0.0"
	NewsletterVersion = "1.0.0"
)

// SLA hours allowed for the support extension (SPEC.md section 8).
const (
	MinSLAHours     = 1
	MaxSLAHours     = 168
	DefaultSLAHours = 24
)

// Builtin returns the four app extensions that ship with cfgd, built anew on
// each call so that no caller can change another's list.
func Builtin() []Extension {
	return []Extension{
		{Name: "payments", Version: PaymentsVersion, Kind: App, Settings: func(r *config.Reader) any { return ReadPayments(r) }},
		{Name: "leads", Version: LeadsVersion, Kind: App, Settings: func(r *config.Reader) any { return ReadLeads(r) }},
		{Name: "support", Version: SupportVersion, Kind: App, Settings: func(r *config.Reader) any { return ReadSupport(r) }},
		{Name: "newsletter", Version: NewsletterVersion, Kind: App, Settings: func(r *config.Reader) any { return ReadNewsletter(r) }},
	}
}

// Payments is the payments extension's own settings.
type Payments struct {
	CryptoAPIKey        config.Secret `json:"crypto_api_key"`
	CryptoWebhookSecret config.Secret `json:"crypto_webhook_secret"`
}

// ReadPayments reads the payments settings; problems are left in r. Neither
// key is required: the spec only says they come from the environment, and
// the API root shows "" for one that is missing.
func ReadPayments(r *config.Reader) Payments {
	return Payments{
		CryptoAPIKey:        config.NewSecret(r.Secret("PAYMENTS_API_KEYS__CRYPTO_API_KEY", false)),
		CryptoWebhookSecret: config.NewSecret(r.Secret("PAYMENTS_API_KEYS__CRYPTO_WEBHOOK_SECRET", false)),
	}
}

// Leads is the leads extension's own settings.
type Leads struct {
	TelegramEnabled   bool          `json:"telegram_enabled"`
	EmailEnabled      bool          `json:"email_enabled"`
	TelegramBotToken  config.Secret `json:"telegram_bot_token"`
	NotificationEmail string        `json:"notification_email"`
}

// ReadLeads reads the leads settings; problems are left in r. The token and
// the address are required whichever channel is on, as the spec has them.
func ReadLeads(r *config.Reader) Leads {
	return Leads{
		TelegramEnabled:   r.Bool("LEADS__TELEGRAM_ENABLED", true),
		EmailEnabled:      r.Bool("LEADS__EMAIL_ENABLED", true),
		TelegramBotToken:  config.NewSecret(r.Secret("TELEGRAM__BOT_TOKEN", true)),
		NotificationEmail: r.Email("LEADS__NOTIFICATION_EMAIL", "", true),
	}
}

// Support is the support extension's own settings.
type Support struct {
	TicketAutoAssign         bool `json:"ticket_auto_assign"`
	SLATrackingEnabled       bool `json:"sla_tracking_enabled"`
	SLAHours                 int  `json:"sla_hours"`
	LiveChatEnabled          bool `json:"live_chat_enabled"`
	KnowledgeBaseIntegration bool `json:"knowledge_base_integration"`
}

// ReadSupport reads the support settings; problems are left in r.
func ReadSupport(r *config.Reader) Support {
	return Support{
		TicketAutoAssign:         r.Bool("SUPPORT__TICKET_AUTO_ASSIGN", true),
		SLATrackingEnabled:       r.Bool("SUPPORT__SLA_TRACKING_ENABLED", true),
		SLAHours:                 r.IntRange("SUPPORT__SLA_HOURS", DefaultSLAHours, MinSLAHours, MaxSLAHours),
		LiveChatEnabled:          r.Bool("SUPPORT__LIVE_CHAT_ENABLED", false),
		KnowledgeBaseIntegration: r.Bool("SUPPORT__KNOWLEDGE_BASE_INTEGRATION", true),
	}
}

// Newsletter is the newsletter extension's own settings.
type Newsletter struct {
	FromEmail               string `json:"from_email"`
	FromName                string `json:"from_name"`
	DoubleOptIn             bool   `json:"double_opt_in"`
	UnsubscribeLinkRequired bool   `json:"unsubscribe_link_required"`
}

// ReadNewsletter reads the newsletter settings; problems are left in r.
func ReadNewsletter(r *config.Reader) Newsletter {
	return Newsletter{
		FromEmail:               r.Email("NEWSLETTER__FROM_EMAIL", "", true),
		FromName:                r.Required("NEWSLETTER__FROM_NAME", "a sender name such as Acme News"),
		DoubleOptIn:             r.Bool("NEWSLETTER__DOUBLE_OPT_IN", true),
		UnsubscribeLinkRequired: r.Bool("NEWSLETTER__UNSUBSCRIBE_LINK_REQUIRED", true),
	}
}
