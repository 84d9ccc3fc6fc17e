package dashboard_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"smsgw/internal/provider/httpprov"
	"smsgw/internal/testclient"
)

// postReceipt posts one signed receipt of the generic protocol.
func (s *stack) postReceipt(t *testing.T, ref, status string) {
	t.Helper()
	b, err := json.Marshal(httpprov.ReceiptBody{Reference: ref, Status: status})
	if err != nil {
		t.Fatal(err)
	}
	req := testclient.New(t, http.MethodPost, s.base+"/v1/receipts/http", string(b),
		httpprov.HeaderReceiptSignature, httpprov.SignReceipt(receiptSecret, b))
	if res := testclient.Do(t, nil, req); res.Status != http.StatusNoContent {
		t.Fatalf("receipt: %d", res.Status)
	}
}

// TestDeliveryRatioInBrowser: the queues table shows each class's
// delivery ratio from the receipts, and a dash for a class without any.
func TestDeliveryRatioInBrowser(t *testing.T) {
	exe := chromiumPath(t)
	st := startStack(t)
	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	cell := func(class string) string { return `#queues tr[data-class=` + class + `] td[data-field=delivered]` }

	var ids []string
	for range 4 {
		var a struct {
			ID string `json:"id"`
		}
		body := map[string]string{"to": "+819012345678", "body": "your parcel", "class": "transactional"}
		if code := st.call(t, "POST", "/v1/messages", notifyKey, body, &a); code != 202 {
			t.Fatalf("POST /v1/messages: %d", code)
		}
		ids = append(ids, a.ID)
	}
	for _, id := range ids {
		st.waitStatus(t, notifyKey, id, wait, "sent")
	}
	for i, id := range ids {
		status := "delivered"
		if i == 0 {
			status = "undelivered"
		}
		st.postReceipt(t, id, status)
	}

	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText(cell("transactional"), "75.0 %", wait)
	if got := br.text(cell("marketing")); got != "—" {
		t.Errorf("marketing without receipts shows %q, want —", got)
	}
	br.noProblems()
}
