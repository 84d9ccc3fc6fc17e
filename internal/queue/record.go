package queue

import (
	"fmt"
	"time"

	"smsgw/internal/sms"
)

// Record is how both backends store a message's own fields, the part of
// their stored records they share (each embeds it and adds its own
// bookkeeping; the JSON object is flat). Its JSON names are the storage
// schema, not sms.Message's: renaming a field of the domain type changes
// nothing stored, and renaming a field here means still reading the old
// name (and, for redisq, changing every Lua script that names it). Names are
// short (the embedded store fsyncs every page, Redis keeps every byte in
// RAM). Times are integer Unix milliseconds, 0 (left out) for none: the
// resolution of the embedded store's indexes, and exact in Redis's cjson,
// which writes numbers with 14 significant digits (a µs time would be
// rounded by the first script that rewrites the record). The id is the key,
// not repeated in the record. The body and the full number (and its
// suppression-list id) are fields of their own, so that a finished record
// can drop them. A record always has "s"; a stored value without it is a
// legacy message (see LegacyMessage).
type Record struct {
	Producer  string `json:"p"`            // producer name; the backend counts outstanding messages by it
	Class     uint8  `json:"c"`            // class code: 0 otp, 1 transactional, 2 marketing (ClassCode)
	To        string `json:"to,omitempty"` // recipient, E.164
	NumberID  string `json:"ni,omitempty"` // the number's suppression-list id (sms.Message.NumberID); a take checks the list with it
	From      string `json:"fr,omitempty"` // sender id
	Body      string `json:"b,omitempty"`  // message text
	Reference string `json:"r,omitempty"`  // the producer's own id
	Segments  int    `json:"g,omitempty"`  // provider rate units the message costs

	CallbackURL string `json:"cb,omitempty"` // the message's own callback_url
	Callbacks   bool   `json:"w,omitempty"`  // status events wanted: every transition that ends or changes the story writes one to the outbox

	IdempotencyKey string `json:"k,omitempty"` // the producer's Idempotency-Key
	RequestHash    string `json:"h,omitempty"` // digest of the creating request

	Created   int64 `json:"tc,omitempty"` // created; redisq's enqueue script sets it to the Redis clock when 0
	SendAt    int64 `json:"sa,omitempty"` // the producer's send_at
	NotBefore int64 `json:"tb,omitempty"` // not taken before; rounded up to the ms
	Expires   int64 `json:"te,omitempty"` // expiry
	Updated   int64 `json:"tu,omitempty"` // last change (redisq: Redis clock)
	Sent      int64 `json:"ts,omitempty"` // sent (redisq: Redis clock)

	Status     string `json:"s"`            // status code: q queued, l sending (leased), s sent, f failed, x expired, v delivered, u undelivered, c canceled
	Attempts   int    `json:"a,omitempty"`  // attempts spent
	Crashes    int    `json:"x,omitempty"`  // sends that crashed their sender
	LastError  string `json:"e,omitempty"`  // short, safe text of the last failure
	ProviderID string `json:"pm,omitempty"` // the provider's message id
	Dead       bool   `json:"d,omitempty"`  // a dead letter (status f)

	BatchID string `json:"bt,omitempty"` // the batch request that created it (sms.Message.BatchID)
	// The producer's budget charge (sms.Budget): units, and the ids of the
	// day and month charged. Both backends give the units back to these
	// periods when the message ends unsent (budget.go).
	BudgetUnits int    `json:"bu,omitempty"`
	BudgetDay   string `json:"bd,omitempty"`
	BudgetMonth string `json:"bm,omitempty"`
}

// ToRecord is m as stored.
func ToRecord(m *sms.Message) (Record, error) {
	class, err := ClassCode(m.Class)
	if err != nil {
		return Record{}, fmt.Errorf("message %s: %w", m.ID, err)
	}
	status, err := StatusCode(m.Status)
	if err != nil {
		return Record{}, fmt.Errorf("message %s: %w", m.ID, err)
	}
	r := Record{
		Producer: m.Producer, Class: class, To: m.To, NumberID: m.NumberID, From: m.From, Body: m.Body,
		Reference: m.Reference, Segments: m.Segments, CallbackURL: m.CallbackURL, Callbacks: m.Callbacks,
		IdempotencyKey: m.IdempotencyKey, RequestHash: m.RequestHash,
		Status: status, Attempts: m.Attempts, Crashes: m.Crashes, LastError: m.LastError, ProviderID: m.ProviderID, Dead: m.Dead,
		BatchID:     m.BatchID,
		BudgetUnits: m.Budget.Units, BudgetDay: m.Budget.Day.ID, BudgetMonth: m.Budget.Month.ID,
	}
	for _, f := range r.times(m) {
		*f.ms = UnixMs(*f.t)
	}
	// Rounded up, so that a message is never taken before its time.
	r.NotBefore = UnixMsUp(m.NotBefore)
	return r, nil
}

// timeField is a time of a message and the record's field that stores it.
type timeField struct {
	t  *time.Time
	ms *int64
}

// times pairs each time of m with its field in r: the one list both
// directions go by.
func (r *Record) times(m *sms.Message) []timeField {
	return []timeField{
		{&m.CreatedAt, &r.Created}, {&m.SendAt, &r.SendAt}, {&m.NotBefore, &r.NotBefore},
		{&m.ExpiresAt, &r.Expires}, {&m.UpdatedAt, &r.Updated}, {&m.SentAt, &r.Sent},
	}
}

// Message is the record of message id as the domain type.
func (r *Record) Message(id string) (*sms.Message, error) {
	class, ok := CodeClass(r.Class)
	if !ok {
		return nil, fmt.Errorf("record %s: unknown class code %d", id, r.Class)
	}
	status, ok := CodeStatus(r.Status)
	if !ok {
		return nil, fmt.Errorf("record %s: unknown status code %q", id, r.Status)
	}
	m := &sms.Message{
		ID: id, Producer: r.Producer, Class: class, To: r.To, NumberID: r.NumberID, From: r.From, Body: r.Body,
		Reference: r.Reference, Segments: r.Segments, CallbackURL: r.CallbackURL, Callbacks: r.Callbacks,
		IdempotencyKey: r.IdempotencyKey, RequestHash: r.RequestHash,
		Status: status, Attempts: r.Attempts, Crashes: r.Crashes, LastError: r.LastError, ProviderID: r.ProviderID, Dead: r.Dead,
		BatchID: r.BatchID,
		Budget:  sms.Budget{Units: r.BudgetUnits, Day: sms.BudgetPeriod{ID: r.BudgetDay}, Month: sms.BudgetPeriod{ID: r.BudgetMonth}},
	}
	for _, f := range r.times(m) {
		*f.t = FromMs(*f.ms)
	}
	return m, nil
}
