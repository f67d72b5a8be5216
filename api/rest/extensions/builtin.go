package extensions

import "github.com/cfgd/cfgd/deploy/config"

// Versions of the built-in extensions, shown by their API roots.
const (
	PaymentsVersion   = "1.0.0"
	LeadsVersion      = "1.0.0"
	SupportVersion    = "1.0.0"
	NewsletterVersion = "1.0.0"
)

// SLA hours allowed for the support extension (docs/settings.md).
const (
	MinSLAHours     = 1
	MaxSLAHours     = 168
	DefaultSLAHours = 24
)

// Builtin returns the four app extensions that ship with cfgd, built anew on
// each call so that no caller can change another's list.
func Builtin() []Extension {
	return []Extension{
		{Name: "payments", Version: PaymentsVersion, Kind: App, Settings: func(v Vars) any { return ReadPayments(v) }},
		{Name: "leads", Version: LeadsVersion, Kind: App, Settings: func(v Vars) any { return ReadLeads(v) }},
		{Name: "support", Version: SupportVersion, Kind: App, Settings: func(v Vars) any { return ReadSupport(v) }},
		{Name: "newsletter", Version: NewsletterVersion, Kind: App, Settings: func(v Vars) any { return ReadNewsletter(v) }},
	}
}

// Payments is the payments extension's own settings.
type Payments struct {
	CryptoAPIKey        config.Secret `json:"crypto_api_key"`
	CryptoWebhookSecret config.Secret `json:"crypto_webhook_secret"`
}

// ReadPayments reads the payments settings. Neither
// key is required: the spec only says they come from the environment, and
// the API root shows "" for one that is missing.
func ReadPayments(v Vars) Payments {
	return Payments{
		CryptoAPIKey:        v.Secret("PAYMENTS_API_KEYS__CRYPTO_API_KEY", false, "payments: the crypto payment provider's API key"),
		CryptoWebhookSecret: v.Secret("PAYMENTS_API_KEYS__CRYPTO_WEBHOOK_SECRET", false, "payments: the secret the provider signs its webhooks with"),
	}
}

// Leads is the leads extension's own settings.
type Leads struct {
	TelegramEnabled   bool          `json:"telegram_enabled"`
	EmailEnabled      bool          `json:"email_enabled"`
	TelegramBotToken  config.Secret `json:"telegram_bot_token"`
	NotificationEmail string        `json:"notification_email"`
}

// ReadLeads reads the leads settings. The token and
// the address are required whichever channel is on, as the spec has them.
func ReadLeads(v Vars) Leads {
	return Leads{
		TelegramEnabled:   v.Bool("LEADS__TELEGRAM_ENABLED", true, "leads: notify new leads by Telegram"),
		EmailEnabled:      v.Bool("LEADS__EMAIL_ENABLED", true, "leads: notify new leads by e-mail"),
		TelegramBotToken:  v.Secret("TELEGRAM__BOT_TOKEN", true, "leads: the Telegram bot's token"),
		NotificationEmail: v.Email("LEADS__NOTIFICATION_EMAIL", true, "leads: the address new leads are sent to"),
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

// ReadSupport reads the support settings.
func ReadSupport(v Vars) Support {
	return Support{
		TicketAutoAssign:         v.Bool("SUPPORT__TICKET_AUTO_ASSIGN", true, "support: assign new tickets automatically"),
		SLATrackingEnabled:       v.Bool("SUPPORT__SLA_TRACKING_ENABLED", true, "support: track response times against the SLA"),
		SLAHours:                 v.IntRange("SUPPORT__SLA_HOURS", DefaultSLAHours, MinSLAHours, MaxSLAHours, "support: hours to the first answer"),
		LiveChatEnabled:          v.Bool("SUPPORT__LIVE_CHAT_ENABLED", false, "support: offer live chat"),
		KnowledgeBaseIntegration: v.Bool("SUPPORT__KNOWLEDGE_BASE_INTEGRATION", true, "support: link the knowledge base from tickets"),
	}
}

// Newsletter is the newsletter extension's own settings.
type Newsletter struct {
	FromEmail               string `json:"from_email"`
	FromName                string `json:"from_name"`
	DoubleOptIn             bool   `json:"double_opt_in"`
	UnsubscribeLinkRequired bool   `json:"unsubscribe_link_required"`
}

// ReadNewsletter reads the newsletter settings.
func ReadNewsletter(v Vars) Newsletter {
	return Newsletter{
		FromEmail:               v.Email("NEWSLETTER__FROM_EMAIL", true, "newsletter: the sender address"),
		FromName:                v.Required("NEWSLETTER__FROM_NAME", "a sender name such as Acme News", "newsletter: the sender name"),
		DoubleOptIn:             v.Bool("NEWSLETTER__DOUBLE_OPT_IN", true, "newsletter: confirm each subscription by e-mail"),
		UnsubscribeLinkRequired: v.Bool("NEWSLETTER__UNSUBSCRIBE_LINK_REQUIRED", true, "newsletter: every issue carries an unsubscribe link"),
	}
}
