// Package token issues and checks cfgd's JWTs: access and refresh tokens of
// an API session, and the cookie token of an admin web session. Exactly one
// algorithm is accepted (the configured one), so neither "none" nor an
// HS256 token forged with the Ed25519 public key can pass, and the kind
// claim keeps a refresh token from serving as an access token or the other
// way round. Access tokens are RFC 9068 JWT access tokens (typ at+jwt);
// refresh tokens have a typ and an audience of their own, so standard
// verifiers of access tokens refuse them too.
package token

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Kind is the token_type claim.
type Kind string

// Token kinds.
const (
	Access  Kind = "access"
	Refresh Kind = "refresh"
	Web     Kind = "web" // the admin session cookie
)

// JOSE header types (typ) of the kinds. An access token is an RFC 9068
// JWT access token, so a standard verifier accepts it; a refresh token has
// a type of its own (and an audience of its own, RefreshAudience), so the
// same verifier refuses it.
const (
	TypeAccess  = "at+jwt"
	TypeRefresh = "refresh+jwt"
	TypeWeb     = "JWT"
	// typeLegacy is what every token carried before the types above; such
	// tokens stay valid until they expire (see Parse).
	typeLegacy = "JWT"
)

// Type is the typ header of a kind.
func (k Kind) Type() string {
	switch k {
	case Access:
		return TypeAccess
	case Refresh:
		return TypeRefresh
	default:
		return TypeWeb
	}
}

// Claims of every cfgd token.
type Claims struct {
	jwt.RegisteredClaims
	// ClientID is RFC 9068's client_id: the client the token was issued
	// to (cfgd's own sign-in, Config.ClientID).
	ClientID  string `json:"client_id,omitempty"`
	Kind      Kind   `json:"token_type"`
	SessionID string `json:"sid"`
	// UserVersion is the user stream version at sign-in; readers of the
	// user's read model wait until it is at least this far (read-your-writes).
	UserVersion int64 `json:"uver,omitempty"`
}

// UserID returns the subject as a user id.
func (c *Claims) UserID() int64 {
	id, _ := strconv.ParseInt(c.Subject, 10, 64)
	return id
}

// ErrInvalid covers every way a token can be wrong; the reason is wrapped
// for logs and never shown to the client.
var ErrInvalid = errors.New("token is invalid or expired")

// Config of a Service.
type Config struct {
	Issuer string
	// Audience is the aud of access and web tokens; a refresh token's is
	// RefreshAudience(Audience), so it never passes for an access token.
	Audience string
	// ClientID is the client_id of access tokens; default the issuer.
	ClientID   string
	AccessTTL  time.Duration
	RefreshTTL time.Duration
	WebTTL     time.Duration
	Now        func() time.Time // default time.Now
	// ReloadEvery is how often a reloading Service reads its keys again;
	// default ReloadEvery.
	ReloadEvery time.Duration
	// ReloadFailed hears why reloading the keys failed (NewReloading);
	// the Service keeps the keys it has.
	ReloadFailed func(error)
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.Issuer == "" || c.Audience == "" {
		errs = append(errs, errors.New("token: issuer and audience are required"))
	}
	if c.AccessTTL <= 0 || c.RefreshTTL <= 0 || c.WebTTL <= 0 {
		errs = append(errs, errors.New("token: every TTL must be positive"))
	}
	return errors.Join(errs...)
}

// Service signs with the signing key of its key set and verifies with the
// key a token's kid names.
type Service struct {
	cfg    Config
	keys   atomic.Pointer[Keys]
	parser *jwt.Parser

	// file, when set, is where the keys are read again (NewReloading).
	file     Reloader
	reloadMu sync.Mutex
	loadedAt atomic.Int64 // unix nanoseconds of the last periodic reload
	// looks counts the looks at the key file begun (reads and checks for
	// an unknown kid): a request that finds one begun after it arrived
	// takes its result instead of looking again.
	looks atomic.Uint64
	seen  fs.FileInfo // the key file as last read (or found unreadable); reloadMu
}

// ReloadEvery is the default of Config.ReloadEvery: how often a reloading
// Service reads its keys again, so replicas converge on the newest signing
// key after a rotation. A token naming a key the Service does not know
// reads the file at once when it changed (Parse).
const ReloadEvery = 30 * time.Second

// Reloader is where a reloading Service reads its keys again: a Source
// whose key file sits on storage every replica shares.
type Reloader interface {
	// Load reads the key set.
	Load() (*Keys, error)
	// Stat is the key file as it is now, compared with the one Load read
	// last to tell whether reading it again can find another key.
	Stat() (fs.FileInfo, error)
}

// NewReloading returns a Service on keys that reads its keys again from
// file, so a rotation reaches every replica without a restart: every
// ReloadEvery, and at once when a token names a key it does not know and
// the file changed since it was last read. A key new in the file verifies
// at once and signs two reload intervals after it was made, when every
// replica has read it.
func NewReloading(cfg Config, keys *Keys, file Reloader) (*Service, error) {
	s, err := New(cfg, keys)
	if err != nil {
		return nil, err
	}
	s.file = file
	s.seen = keys.file
	s.loadedAt.Store(s.cfg.Now().UnixNano())
	return s, nil
}

// New returns a Service.
func New(cfg Config, keys *Keys) (*Service, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClientID == "" {
		cfg.ClientID = cfg.Issuer
	}
	if cfg.ReloadEvery <= 0 {
		cfg.ReloadEvery = ReloadEvery
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if keys == nil {
		return nil, errors.New("token: no keys")
	}
	s := &Service{
		cfg: cfg,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{keys.Algorithm()}),
			jwt.WithIssuer(cfg.Issuer),
			// The audience depends on the kind: Parse checks it.
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithTimeFunc(cfg.Now),
			jwt.WithLeeway(5*time.Second),
			jwt.WithStrictDecoding(),
		),
	}
	s.keys.Store(keys)
	return s, nil
}

// activation is how long a reloading Service waits before signing with a
// key new in its file: two reload intervals, so every replica reading the
// file verifies the key before any signs with it.
func (s *Service) activation() time.Duration {
	if s.file == nil {
		return 0
	}
	return 2 * s.cfg.ReloadEvery
}

// current is the key set, read again when the reload interval has passed
// (reloading Services only). The interval stays even though an unknown kid
// reads a changed file at once (forUnknownKid): it is what dates the
// activation of a new key, and it covers storage whose file attributes lag
// behind its content.
func (s *Service) current() *Keys {
	k := s.keys.Load()
	if s.file == nil {
		return k
	}
	due := func() bool { return s.cfg.Now().Sub(time.Unix(0, s.loadedAt.Load())) >= s.cfg.ReloadEvery }
	if !due() {
		return k
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if !due() {
		return s.keys.Load() // another request reloaded while this one waited
	}
	s.loadedAt.Store(s.cfg.Now().UnixNano())
	s.looks.Add(1)
	seen, _ := s.file.Stat()
	return s.read(seen)
}

// forUnknownKid is the key set once the key file has been looked at after
// the call began: a token naming a key this replica does not know may come
// from another replica that already read a rotation. The file is read again
// only when it is another file than the one read last (sameFile), so a flood
// of tokens with made-up kids costs one stat at a time (concurrent callers
// share it) and never a read of an unchanged file.
func (s *Service) forUnknownKid() *Keys {
	if s.file == nil {
		return s.keys.Load()
	}
	arrived := s.looks.Load()
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.looks.Load() != arrived {
		// A look begun after this call arrived has ended (it held the lock):
		// its keys are as fresh as another look would make them.
		return s.keys.Load()
	}
	s.looks.Add(1)
	now, err := s.file.Stat()
	if err != nil {
		now = nil // unreadable: read again once it is readable
	}
	if sameFile(now, s.seen) {
		return s.keys.Load()
	}
	return s.read(now)
}

// read reads the key file again (reloadMu held); stat is the file as
// found just before, remembered when the read fails so a broken file is
// read (and reported) once, not for every token.
func (s *Service) read(stat fs.FileInfo) *Keys {
	k := s.keys.Load()
	next, err := s.file.Load()
	if err == nil && next.method.Alg() != k.method.Alg() {
		err = fmt.Errorf("token: the reloaded keys are %s, not %s", next.method.Alg(), k.method.Alg())
	}
	if err != nil {
		s.seen = stat
		if s.cfg.ReloadFailed != nil {
			s.cfg.ReloadFailed(err)
		}
		return k
	}
	s.seen = next.file
	if s.seen == nil {
		s.seen = stat
	}
	s.keys.Store(next)
	return next
}

// RefreshAudience is the aud of refresh tokens for access audience aud:
// the token endpoint of the issuer is their only reader.
func RefreshAudience(aud string) string { return aud + ":refresh" }

// audience is the aud of kind k.
func (s *Service) audience(k Kind) string {
	if k == Refresh {
		return RefreshAudience(s.cfg.Audience)
	}
	return s.cfg.Audience
}

// TTL of a kind.
func (s *Service) TTL(k Kind) time.Duration {
	switch k {
	case Access:
		return s.cfg.AccessTTL
	case Refresh:
		return s.cfg.RefreshTTL
	default:
		return s.cfg.WebTTL
	}
}

// Issued is a signed token and its claims.
type Issued struct {
	Token  string
	Claims Claims
}

// Spec says what to put in a token. An empty ID gets a fresh random jti.
type Spec struct {
	Kind        Kind
	UserID      int64
	SessionID   string
	ID          string
	UserVersion int64
	// IssuedAt is the token's iat: the instant of the command that issues
	// it, so an expiry the command computed from the same instant gives
	// exp - iat exactly the TTL (zero: the service's clock).
	IssuedAt  time.Time
	ExpiresAt time.Time // zero: iat + the kind's TTL
}

// Issue signs a token.
func (s *Service) Issue(sp Spec) (Issued, error) {
	now := sp.IssuedAt
	if now.IsZero() {
		now = s.cfg.Now()
	}
	exp := sp.ExpiresAt
	if exp.IsZero() {
		exp = now.Add(s.TTL(sp.Kind))
	}
	id := sp.ID
	if id == "" {
		id = uuid.NewString()
	}
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.cfg.Issuer,
			Audience:  jwt.ClaimStrings{s.audience(sp.Kind)},
			Subject:   strconv.FormatInt(sp.UserID, 10),
			ExpiresAt: jwt.NewNumericDate(exp),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        id,
		},
		Kind:        sp.Kind,
		SessionID:   sp.SessionID,
		UserVersion: sp.UserVersion,
	}
	if sp.Kind == Access {
		c.ClientID = s.cfg.ClientID
	}
	keys := s.current()
	k := keys.signing(now, s.activation())
	t := jwt.NewWithClaims(keys.method, c)
	t.Header["kid"] = k.kid
	t.Header["typ"] = sp.Kind.Type()
	signed, err := t.SignedString(k.sign)
	if err != nil {
		return Issued{}, fmt.Errorf("sign %s token: %w", sp.Kind, err)
	}
	return Issued{Token: signed, Claims: c}, nil
}

// MaxTokenLength bounds what Parse looks at; cfgd's tokens are far shorter.
const MaxTokenLength = 4096

// Parse checks a token of the wanted kind and returns its claims. Any
// failure is ErrInvalid (wrapping the reason). The typ header and the
// audience must be the kind's; a token issued before the kinds had types
// of their own (typ JWT, the access audience) is accepted until it
// expires, its token_type claim still deciding its kind.
func (s *Service) Parse(raw string, want Kind) (*Claims, error) {
	if raw == "" || len(raw) > MaxTokenLength {
		return nil, fmt.Errorf("%w: empty or oversized", ErrInvalid)
	}
	var c Claims
	tok, err := s.parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		// WithValidMethods already pinned the algorithm; the kid picks
		// the key. A token without one (none of cfgd's) gets the signing
		// key only.
		raw, ok := t.Header["kid"]
		if !ok {
			return s.current().signing(s.cfg.Now(), s.activation()).verify, nil
		}
		kid, _ := raw.(string)
		if key, ok := s.current().verifier(kid); ok {
			return key, nil
		}
		if key, ok := s.forUnknownKid().verifier(kid); ok {
			return key, nil
		}
		return nil, errors.New("unknown key id")
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	typ, _ := tok.Header["typ"].(string)
	aud := s.audience(want)
	switch {
	case typ == want.Type():
	case typ == typeLegacy:
		aud = s.cfg.Audience
	default:
		return nil, fmt.Errorf("%w: a token of type %q where %q was expected", ErrInvalid, typ, want.Type())
	}
	if len(c.Audience) != 1 || c.Audience[0] != aud {
		return nil, fmt.Errorf("%w: audience %v, want %q", ErrInvalid, c.Audience, aud)
	}
	if c.Kind != want {
		return nil, fmt.Errorf("%w: a %q token where %q was expected", ErrInvalid, c.Kind, want)
	}
	if c.ID == "" || c.SessionID == "" || c.IssuedAt == nil {
		return nil, fmt.Errorf("%w: missing jti, sid or iat", ErrInvalid)
	}
	if id, err := strconv.ParseInt(c.Subject, 10, 64); err != nil || id < 1 {
		return nil, fmt.Errorf("%w: bad subject", ErrInvalid)
	}
	return &c, nil
}

// JWKS is the JSON Web Key Set of every verification key, the signing one
// first; it holds no key at all for HS256, whose keys are shared secrets.
func (s *Service) JWKS() []byte { return s.current().jwks }

// Issuer is the iss of every token.
func (s *Service) Issuer() string { return s.cfg.Issuer }

// Algorithm is the one accepted signing algorithm.
func (s *Service) Algorithm() string { return s.keys.Load().method.Alg() }
