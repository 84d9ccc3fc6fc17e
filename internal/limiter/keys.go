package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"smsgw/internal/keyspace"
)

// Every Redis key of the limiter is built here and nowhere else, from the
// account's key space: all keys of one provider account share its hash tag
// (keyspace), so that one script may touch the pause, global and class keys
// together on Redis Cluster (they land in one slot).

// keySet names the keys of one account's limiter.
type keySet struct {
	tag string // the account's hash tag
}

// newKeySet names the keys of account, refusing an account that
// keyspace.ValidateAccount refuses.
func newKeySet(account string) (keySet, error) {
	sp, err := keyspace.New(account)
	if err != nil {
		return keySet{}, fmt.Errorf("limiter: account: %w", err)
	}
	return keySet{tag: sp.Tag()}, nil
}

func (k keySet) pause() string              { return k.tag + ":limiter:pause" }
func (k keySet) global() string             { return k.tag + ":limiter:global" }
func (k keySet) class(name string) string   { return k.tag + ":limiter:class:" + name }
func (k keySet) ingress(name string) string { return k.tag + ":ingress:" + name }

// sender is the key of one sender's schedule (a limited sender) and, with
// ":pause", of its pause. The sender is hashed: a long code is a phone
// number, which no key name shows, and any "from" gives a key of one
// length under the account's hash tag.
func (k keySet) sender(name string) string {
	sum := sha256.Sum256([]byte(name))
	return k.tag + ":limiter:sender:" + hex.EncodeToString(sum[:10])
}

func (k keySet) senderPause(name string) string { return k.sender(name) + ":pause" }
