package otp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Request asks for a code to be sent to Email. SourceURL, when given, is
// remembered for the verify.
type Request struct {
	Email     string
	SourceURL string
	Meta      events.Metadata
}

// RequestResult says which code was sent and until when it is valid.
type RequestResult struct {
	CodeID    string
	ExpiresAt time.Time
}

// RequestHandler handles Request.
type RequestHandler struct {
	pool      store.DB
	hasher    *Hasher
	templates *Templates
	sender    mail.Sender
	now       func() time.Time
	log       *slog.Logger
}

// NewRequestHandler returns the handler.
func NewRequestHandler(pool store.DB, hasher *Hasher, templates *Templates, sender mail.Sender, now func() time.Time, log *slog.Logger) *RequestHandler {
	return &RequestHandler{pool: pool, hasher: hasher, templates: templates, sender: sender, now: now, log: log}
}

// Handle issues a new code (replacing any earlier one) and e-mails it. It
// fails with identity.ErrEmailRequired or ErrInvalidEmail, user.ErrBadSourceURL,
// *RateLimitedError for a fourth request within the hour, or
// ErrDeliveryFailed when the e-mail could not be sent (the code is then void).
func (h *RequestHandler) Handle(ctx context.Context, cmd Request) (RequestResult, error) {
	email, err := identity.NormaliseEmail(cmd.Email)
	if err != nil {
		return RequestResult{}, err
	}
	source := ""
	if cmd.SourceURL != "" {
		if source, err = user.CheckSourceURL(cmd.SourceURL); err != nil {
			return RequestResult{}, err
		}
	}
	var plain string
	stream := identity.OTPStream(email)
	res, err := commands.Execute(ctx, h.pool, "request otp",
		func(ctx context.Context) (state, error) {
			envs, err := store.Load(ctx, h.pool, stream)
			if err != nil {
				return state{}, err
			}
			return fold(envs)
		},
		func(_ context.Context, s state) (commands.Decision[RequestResult], error) {
			type none = commands.Decision[RequestResult]
			now := h.now()
			if wait := s.retryAfter(now); wait > 0 {
				return none{}, &RateLimitedError{RetryAfter: wait}
			}
			var err error
			if plain, err = NewCode(); err != nil {
				return none{}, err
			}
			id := uuid.NewString()
			issued := identity.OTPIssued{
				CodeID: id, Email: email, CodeHMAC: h.hasher.Sum(id, email, plain),
				IssuedAt: now.UTC(), ExpiresAt: now.Add(CodeTTL).UTC(), SourceURL: source,
			}
			env, err := events.New(stream, issued, cmd.Meta, now)
			if err != nil {
				return none{}, err
			}
			// One INSERT is its own transaction; the unique (stream,
			// version) index turns a concurrent request into a conflict and
			// a retry.
			return none{
				Writes: []store.Write{{Stream: stream, Expected: s.version, Events: []events.Envelope{env}}},
				Result: RequestResult{CodeID: id, ExpiresAt: issued.ExpiresAt},
			}, nil
		})
	if err != nil {
		return RequestResult{}, err
	}
	msg, err := h.templates.Message(email, plain)
	if err == nil {
		err = h.sender.Send(ctx, msg)
	}
	if err != nil {
		h.log.WarnContext(ctx, "otp e-mail not sent; voiding the code", "code_id", res.CodeID, "err", err)
		// Void with a context the client cannot cancel: a code that was
		// never delivered must not stay usable because the caller left.
		vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if verr := h.void(vctx, email, res.CodeID, err, cmd.Meta); verr != nil {
			h.log.ErrorContext(ctx, "could not void an undelivered otp code", "code_id", res.CodeID, "err", verr)
		}
		return RequestResult{}, fmt.Errorf("%w: %w", ErrDeliveryFailed, err)
	}
	return res, nil
}

// void appends otp.delivery_failed for codeID. It is a fact, not a
// decision, so it goes at whatever version the stream has reached.
func (h *RequestHandler) void(ctx context.Context, email, codeID string, cause error, md events.Metadata) error {
	reason := "send failed"
	var ce interface{ Timeout() bool }
	if errors.As(cause, &ce) && ce.Timeout() {
		reason = "send timed out"
	}
	stream := identity.OTPStream(email)
	_, err := commands.Execute(ctx, h.pool, "void otp",
		func(context.Context) (struct{}, error) { return struct{}{}, nil }, // a fact needs no state
		func(context.Context, struct{}) (commands.Decision[struct{}], error) {
			env, err := events.New(stream, identity.OTPDeliveryFailed{CodeID: codeID, Reason: reason}, md, h.now())
			if err != nil {
				return commands.Decision[struct{}]{}, err
			}
			return commands.Decision[struct{}]{Writes: []store.Write{{Stream: stream, Expected: events.AnyVersion, Events: []events.Envelope{env}}}}, nil
		})
	return err
}
