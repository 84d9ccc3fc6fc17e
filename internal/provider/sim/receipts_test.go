package sim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/sim"
)

// receiver is a gateway's receipt endpoint: it checks each signature and
// records what came, and whether the send it reports had been answered.
type receiver struct {
	mu       sync.Mutex
	got      map[string][]string // reference -> statuses received
	early    int                 // receipts for a reference not answered yet
	answered map[string]bool
	bad      int
}

func (rc *receiver) handler(secret string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if r.Header.Get(httpprov.HeaderReceiptSignature) != httpprov.SignReceipt(secret, raw) {
			rc.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var b httpprov.ReceiptBody
		_ = json.Unmarshal(raw, &b)
		rc.got[b.Reference] = append(rc.got[b.Reference], b.Status)
		if !rc.answered[b.Reference] {
			rc.early++
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// TestReceipts: every accepted send gets its signed receipt, posted
// 1+Duplicates times, with the status the record says; early receipts
// arrive before the send is answered; a receiver that fails at first is
// tried again.
func TestReceipts(t *testing.T) {
	const secret = "s3cret"
	rc := &receiver{got: map[string][]string{}, answered: map[string]bool{}}
	var fails sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		failed := false
		fails.Do(func() { failed = true })
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rc.handler(secret)(w, r)
	}))
	defer srv.Close()
	s, err := sim.New(sim.Config{Receipts: sim.Receipts{URLs: []string{srv.URL}, Secret: secret,
		Delay: 10 * time.Millisecond, UndeliveredShare: 0.5, Duplicates: 1, EarlyShare: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	p, err := httpprov.New(httpprov.Config{URL: s.URL() + "/send"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	const n = 40
	for i := range n {
		id := "msg-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if _, err := p.Send(context.Background(), &provider.Request{ID: id, To: "+819012345678", Body: "hi"}); err != nil {
			t.Fatal(err)
		}
		rc.mu.Lock()
		rc.answered[id] = true
		rc.mu.Unlock()
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().ReceiptsPosted < 2*n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := s.Stats()
	if st.ReceiptsPosted != 2*n || st.ReceiptsFailed != 0 || st.ReceiptsDropped != 0 {
		t.Fatalf("receipts posted %d failed %d dropped %d, want %d 0 0", st.ReceiptsPosted, st.ReceiptsFailed, st.ReceiptsDropped, 2*n)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	statuses := map[string]int{}
	for _, r := range s.Accepted() {
		got := rc.got[r.Reference]
		if len(got) != 2 || got[0] != r.Receipt || got[1] != r.Receipt {
			t.Errorf("%s: receipts %v, want %s twice", r.Reference, got, r.Receipt)
		}
		statuses[r.Receipt]++
	}
	if statuses["delivered"] == 0 || statuses["undelivered"] == 0 || rc.early == 0 || rc.bad != 0 {
		t.Errorf("statuses %v, early %d, bad signatures %d: want both statuses, some early, none bad", statuses, rc.early, rc.bad)
	}
}
