package httpprov

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// The settings of every HTTP adapter are checked here, by the adapter's
// constructor and by the gateway configuration alike, so that both refuse
// the same values with the same words. Errors are *SettingError naming the
// key under the caller's prefix: the configuration passes "provider" or
// "provider.twilio", a constructor its package name.

// SettingError is one refused setting. Key is the whole key path
// ("provider.twilio.account_sid").
type SettingError struct {
	Key     string
	Problem string
}

func (e *SettingError) Error() string { return e.Key + ": " + e.Problem }

// KeyPath joins a prefix and a key name with a dot; an empty prefix leaves
// the name alone.
func KeyPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// Required is the error for a setting that must be set.
func Required(prefix, name string) *SettingError {
	return &SettingError{Key: KeyPath(prefix, name), Problem: "must be set"}
}

// CheckURL is the rule for every adapter's endpoint: an absolute http(s)
// URL. The value is quoted without its password, if it has one.
func CheckURL(key, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return &SettingError{Key: key, Problem: "is not a URL"}
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &SettingError{Key: key, Problem: fmt.Sprintf("%q is not an absolute http(s) URL", u.Redacted())}
	}
	return nil
}

// Settings are the configuration keys of the generic adapter.
type Settings struct {
	URL   string `yaml:"url"`   // the send endpoint, e.g. http://127.0.0.1:9100/send
	Token string `yaml:"token"` // optional bearer token; never logged
}

// Validate reports every problem of s, each a *SettingError under prefix.
func (s Settings) Validate(prefix string) error {
	if s.URL == "" {
		return &SettingError{Key: KeyPath(prefix, "url"), Problem: "must be set (the send endpoint of the generic protocol)"}
	}
	return CheckURL(KeyPath(prefix, "url"), s.URL)
}

// defaultTimeout bounds one attempt when a caller sets none (tests and
// tools); the gateway always passes provider.timeout.
const defaultTimeout = 5 * time.Second

// Conn is what every HTTP adapter's Config says about reaching its vendor,
// with the defaults filled in by Setup.
type Conn struct {
	Timeout time.Duration
	Client  *http.Client
	Logger  *slog.Logger
}

// Setup checks the connection settings every HTTP adapter shares and fills
// their defaults: the timeout must not be negative (0: a 5 s default; the
// error names prefix.timeout), and a nil client or logger becomes
// NewClient() or a discarding logger. The endpoint is the adapter's own
// setting, checked with CheckURL.
func Setup(prefix string, timeout time.Duration, client *http.Client, log *slog.Logger) (Conn, error) {
	if timeout < 0 {
		return Conn{}, &SettingError{Key: KeyPath(prefix, "timeout"), Problem: fmt.Sprintf("%v must not be negative", timeout)}
	}
	c := Conn{Timeout: timeout, Client: client, Logger: log}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.Client == nil {
		c.Client = NewClient()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
