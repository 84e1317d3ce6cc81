package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Access control of the HTTP API: bearer tokens, each with rules by key
// prefix (docs/agent.md, "Access control").
//
// A rule allows some of read, lock, elect and admin on the keys (and
// election names) that start with its prefix; the rule with the longest
// prefix that matches a key decides alone, so a longer rule can take away
// what a shorter one gave (a rule allowing nothing denies). lock and elect
// imply read; admin implies all three. Operations that are not about a key
// (voters, every session) ask for admin on the empty key: only a rule of
// prefix "" can grant them.

// perm is a permission; permNone is asked by routes any valid token may
// use (sessions, status).
type perm string

const (
	permNone  perm = ""
	permRead  perm = "read"
	permLock  perm = "lock"
	permElect perm = "elect"
	permAdmin perm = "admin"
)

// implied lists what each permission also grants.
var implied = map[perm][]perm{
	permRead:  {permRead},
	permLock:  {permLock, permRead},
	permElect: {permElect, permRead},
	permAdmin: {permAdmin, permLock, permElect, permRead},
}

// tokenConfig is one token of the configuration file.
type tokenConfig struct {
	Name string `json:"name"`
	// One of Secret, SecretFile, SecretEnv: the bearer token's value.
	Secret     string       `json:"secret,omitempty"`
	SecretFile string       `json:"secret_file,omitempty"`
	SecretEnv  string       `json:"secret_env,omitempty"`
	Rules      []ruleConfig `json:"rules"`
}

type ruleConfig struct {
	Prefix string   `json:"prefix"`
	Allow  []string `json:"allow"`
}

// minSecret is the shortest secret accepted: a token guessed is a token
// stolen.
const minSecret = 16

// apiToken is a loaded token: its secret's digest and its rules, longest
// prefix first.
type apiToken struct {
	name   string
	digest [sha256.Size]byte
	rules  []rule
}

type rule struct {
	prefix string
	allow  map[perm]bool
}

// acl is every token, and the record of refusals.
type acl struct {
	tokens []*apiToken
	log    hclog.Logger

	mu     sync.Mutex
	logged map[string]time.Time // token and reason → when last logged
	denied map[string]uint64    // token name → refusals
}

// maxLogged bounds the memory of refusals already logged; past it the
// record starts over (a refusal may then be logged again).
const maxLogged = 4096

// deniedLogEvery: the same refusal of the same token is logged at most
// this often.
const deniedLogEvery = time.Minute

// loadACL checks and loads the tokens of the configuration file. lookupEnv
// and readFile are os.LookupEnv and os.ReadFile but for tests.
func loadACL(cfgs []tokenConfig, log hclog.Logger, lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (*acl, error) {
	a := &acl{log: log, logged: map[string]time.Time{}, denied: map[string]uint64{}}
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]string{}
	for i, c := range cfgs {
		if c.Name == "" || strings.ContainsAny(c.Name, " \t\n\"") {
			return nil, fmt.Errorf("tokens[%d]: a name without spaces or quotes is required", i)
		}
		if names[c.Name] {
			return nil, fmt.Errorf("token %q: named twice", c.Name)
		}
		names[c.Name] = true
		secret, err := secretOf(c, lookupEnv, readFile)
		if err != nil {
			return nil, fmt.Errorf("token %q: %w", c.Name, err)
		}
		t := &apiToken{name: c.Name, digest: sha256.Sum256([]byte(secret))}
		if other, dup := digests[t.digest]; dup {
			return nil, fmt.Errorf("token %q: the same secret as token %q", c.Name, other)
		}
		digests[t.digest] = c.Name
		if t.rules, err = rulesOf(c.Rules); err != nil {
			return nil, fmt.Errorf("token %q: %w", c.Name, err)
		}
		a.tokens = append(a.tokens, t)
	}
	return a, nil
}

func secretOf(c tokenConfig, lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (string, error) {
	set := 0
	for _, s := range []string{c.Secret, c.SecretFile, c.SecretEnv} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return "", errors.New("give exactly one of secret, secret_file, secret_env")
	}
	secret := c.Secret
	switch {
	case c.SecretFile != "":
		b, err := readFile(c.SecretFile)
		if err != nil {
			return "", fmt.Errorf("secret_file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
	case c.SecretEnv != "":
		v, ok := lookupEnv(c.SecretEnv)
		if !ok {
			return "", fmt.Errorf("secret_env: %s is not set", c.SecretEnv)
		}
		secret = strings.TrimSpace(v)
	}
	if len(secret) < minSecret {
		return "", fmt.Errorf("the secret has %d bytes: want at least %d", len(secret), minSecret)
	}
	return secret, nil
}

func rulesOf(cfgs []ruleConfig) ([]rule, error) {
	var rules []rule
	seen := map[string]bool{}
	for _, rc := range cfgs {
		if seen[rc.Prefix] {
			return nil, fmt.Errorf("two rules for prefix %q", rc.Prefix)
		}
		seen[rc.Prefix] = true
		r := rule{prefix: rc.Prefix, allow: map[perm]bool{}}
		for _, p := range rc.Allow {
			imp, ok := implied[perm(p)]
			if !ok {
				return nil, fmt.Errorf("prefix %q: unknown permission %q (want read, lock, elect or admin)", rc.Prefix, p)
			}
			for _, q := range imp {
				r.allow[q] = true
			}
		}
		rules = append(rules, r)
	}
	slices.SortFunc(rules, func(a, b rule) int { return len(b.prefix) - len(a.prefix) })
	return rules, nil
}

// authenticate finds the token whose secret is presented. Every token is
// compared, each in constant time, so that the time taken says nothing of
// which secret came close.
func (a *acl) authenticate(presented string) *apiToken {
	d := sha256.Sum256([]byte(presented))
	var found *apiToken
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 {
			found = t
		}
	}
	return found
}

// bearer is the token of an Authorization: Bearer header, if any.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// allows says whether t may do p on key, and if not why.
func (t *apiToken) allows(p perm, key string) (bool, string) {
	for _, r := range t.rules {
		if strings.HasPrefix(key, r.prefix) {
			if r.allow[p] {
				return true, ""
			}
			return false, fmt.Sprintf("token %q lacks %q on %q (its rule for prefix %q allows %s)", t.name, p, key, r.prefix, allowedList(r))
		}
	}
	return false, fmt.Sprintf("token %q lacks %q on %q (no rule's prefix matches it)", t.name, p, key)
}

func allowedList(r rule) string {
	var ps []string
	for p, ok := range r.allow {
		if ok {
			ps = append(ps, string(p))
		}
	}
	if len(ps) == 0 {
		return "nothing"
	}
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}

// denied counts a refusal, and logs it unless the same refusal of the
// same token was logged within deniedLogEvery.
func (a *acl) deniedFor(name, reason string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.denied[name]++
	k := name + "\x00" + reason
	if last, ok := a.logged[k]; ok && now.Sub(last) < deniedLogEvery {
		return
	}
	if len(a.logged) >= maxLogged {
		clear(a.logged)
	}
	a.logged[k] = now
	a.log.Warn("api: request denied", "token", name, "reason", reason)
}

// deniedCounts is how many requests each token had refused, with
// "anonymous" for requests without a valid token.
func (a *acl) deniedCounts() map[string]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]uint64, len(a.denied))
	for k, v := range a.denied {
		out[k] = v
	}
	return out
}
