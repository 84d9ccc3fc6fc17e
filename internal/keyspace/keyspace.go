// Package keyspace is the one home of smsgw's Redis key names: the rule an
// account name must follow and the account's Redis Cluster hash tag.
//
// Every key smsgw writes for a provider account starts with the tag
// {smsgw:<account>}. Redis Cluster hashes only the text between the first
// '{' and the first '}' after it, so all keys of one account live in one
// slot and any Lua script may touch any of them together. Each package
// builds its own key names in its keys.go from a Space, under its own
// subsystem prefix ("q", "limiter", "ingress", "api", "dispatch").
package keyspace

import (
	"errors"
	"fmt"
	"strings"
)

// MaxAccountLen bounds an account name, so that every key built from it is
// bounded too.
const MaxAccountLen = 64

// ErrInvalidAccount is wrapped by every error of ValidateAccount.
var ErrInvalidAccount = errors.New("invalid account")

// ValidateAccount is the one account rule of smsgw: 1 to MaxAccountLen
// characters, each an ASCII letter, digit, '-', '_' or '.'.
//
// Why this set: a '{' or '}' would move or end the hash tag and scatter an
// account's keys over Cluster slots (CROSSSLOT in every script); ':' is the
// separator of our key names, so an account "a:q" would read like account
// "a"'s queue; glob characters (* ? [ ]) would let a KEYS/SCAN pattern for
// one account match another's; spaces, control characters and non-ASCII
// bytes make keys that redis-cli, logs and shells mangle. What is left is
// what account names are in practice ("main", "payments", "eu-1").
func ValidateAccount(account string) error {
	if account == "" {
		return fmt.Errorf("%w: must not be empty", ErrInvalidAccount)
	}
	if len(account) > MaxAccountLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidAccount, len(account), MaxAccountLen)
	}
	for i := 0; i < len(account); i++ {
		if !accountByte(account[i]) {
			return fmt.Errorf("%w: %q may only hold ASCII letters, digits, '-', '_' and '.'", ErrInvalidAccount, account)
		}
	}
	return nil
}

func accountByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}

// Space is the key space of one valid account. The zero Space is not
// usable; get one from New.
type Space struct {
	account string
	tag     string
}

// New returns the key space of account, or an error wrapping
// ErrInvalidAccount when ValidateAccount refuses it.
func New(account string) (Space, error) {
	if err := ValidateAccount(account); err != nil {
		return Space{}, err
	}
	return Space{account: account, tag: "{smsgw:" + account + "}"}, nil
}

// Account is the account name.
func (s Space) Account() string { return s.account }

// Tag is the account's hash tag, {smsgw:<account>}.
func (s Space) Tag() string { return s.tag }

// Key is the tag followed by parts, each after a ':'
// ("{smsgw:main}:limiter:pause" for Key("limiter", "pause")).
func (s Space) Key(parts ...string) string {
	if len(parts) == 0 {
		return s.tag
	}
	return s.tag + ":" + strings.Join(parts, ":")
}

// Prefix is Key(parts...) followed by ':', for a package that appends
// names to it ("{smsgw:main}:q:" for Prefix("q")).
func (s Space) Prefix(parts ...string) string { return s.Key(parts...) + ":" }
