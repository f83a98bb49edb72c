package receiver

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
)

// Authenticator says who sent a request from its bearer token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (principal string, err error)
}

// errNoToken is a request without a bearer token.
var errNoToken = errors.New("no bearer token: send Authorization: Bearer <token>")

func bearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// StaticTokens authenticates against a fixed set of named tokens: the small
// setup, without an identity provider.
type StaticTokens struct {
	names  []string
	tokens [][]byte
}

// LoadStaticTokens reads "name token" lines (blank lines and # comments
// allowed) from a file, typically a mounted Secret.
func LoadStaticTokens(path string) (*StaticTokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read receiver tokens: %w", err)
	}
	defer f.Close()
	st := &StaticTokens{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, token, ok := strings.Cut(text, " ")
		token = strings.TrimSpace(token)
		if !ok || name == "" || len(token) < 16 {
			return nil, fmt.Errorf("%s:%d: want \"name token\" with a token of at least 16 characters", path, line)
		}
		st.Add(name, token)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read receiver tokens: %w", err)
	}
	if len(st.names) == 0 {
		return nil, fmt.Errorf("%s holds no tokens", path)
	}
	return st, nil
}

// Add registers a token under a name.
func (s *StaticTokens) Add(name, token string) {
	s.names = append(s.names, name)
	s.tokens = append(s.tokens, []byte(token))
}

// Authenticate compares in constant time against every token.
func (s *StaticTokens) Authenticate(_ context.Context, token string) (string, error) {
	found := ""
	for i, t := range s.tokens {
		if subtle.ConstantTimeCompare(t, []byte(token)) == 1 {
			found = s.names[i]
		}
	}
	if found == "" {
		return "", errors.New("unknown token")
	}
	return "token:" + found, nil
}

// OIDC verifies JWTs issued by an OpenID Connect issuer for an audience:
// Knative Eventing's OIDC sender identity, or any workload identity.
type OIDC struct {
	verifier *oidc.IDTokenVerifier
}

// NewOIDC discovers the issuer's keys. audience is the receiver's own.
func NewOIDC(ctx context.Context, issuer, audience string) (*OIDC, error) {
	if audience == "" {
		return nil, errors.New("an OIDC audience is required: the audience senders request tokens for")
	}
	p, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		return nil, fmt.Errorf("discover OIDC issuer %s: %w", issuer, err)
	}
	return &OIDC{verifier: p.Verifier(&oidc.Config{ClientID: audience})}, nil
}

// Authenticate verifies signature, issuer, audience and expiry.
func (o *OIDC) Authenticate(ctx context.Context, token string) (string, error) {
	t, err := o.verifier.Verify(ctx, token)
	if err != nil {
		return "", err
	}
	return "oidc:" + t.Subject, nil
}

// anyOf accepts a token any of its authenticators accepts.
type anyOf []Authenticator

func (a anyOf) Authenticate(ctx context.Context, token string) (string, error) {
	var errs []error
	for _, auth := range a {
		p, err := auth.Authenticate(ctx, token)
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// AnyOf combines authenticators; nil ones are skipped.
func AnyOf(auths ...Authenticator) Authenticator {
	var out anyOf
	for _, a := range auths {
		if a != nil && !isNilPointer(a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func isNilPointer(a Authenticator) bool {
	switch v := a.(type) {
	case *StaticTokens:
		return v == nil
	case *OIDC:
		return v == nil
	}
	return false
}
