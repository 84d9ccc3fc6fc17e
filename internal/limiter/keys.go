package limiter

// Every Redis key of the limiter is built here and nowhere else. All keys of
// one provider account share the hash tag {smsgw:<account>}, so that one
// script may touch the pause, global and class keys together on Redis
// Cluster (they land in one slot).

// hashTag is the Cluster hash tag of an account.
func hashTag(account string) string { return "{smsgw:" + account + "}" }

// keySet names the keys of one account's limiter.
type keySet struct {
	tag string
}

func newKeySet(account string) keySet { return keySet{tag: hashTag(account)} }

func (k keySet) pause() string              { return k.tag + ":limiter:pause" }
func (k keySet) global() string             { return k.tag + ":limiter:global" }
func (k keySet) class(name string) string   { return k.tag + ":limiter:class:" + name }
func (k keySet) ingress(name string) string { return k.tag + ":ingress:" + name }
