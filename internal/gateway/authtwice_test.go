package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// A request with two Authorization fields is 401 whichever keys they hold
// and in whichever order, on the producer and the admin API: a proxy in
// front may read the other field than the gateway, so neither is taken.
func TestAuthorizationTwiceRefused(t *testing.T) {
	h := start(t, embeddedMode, nil)
	for _, tc := range []struct {
		method, path, body string
		keys               []string
	}{
		{http.MethodPost, "/v1/messages", `{"to":"+819012345678","body":"hello","class":"marketing"}`, []string{keyLogin, keyNotify}},
		{http.MethodPost, "/v1/messages", `{"to":"+819012345678","body":"hello","class":"marketing"}`, []string{keyNotify, keyNotify}},
		{http.MethodGet, "/v1/admin/stats", "", []string{keyAdmin, keyNotify}},
		{http.MethodGet, "/v1/admin/stats", "", []string{keyNotify, keyAdmin}},
	} {
		hr, err := http.NewRequestWithContext(t.Context(), tc.method, h.base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/json")
		for _, k := range tc.keys {
			hr.Header.Add("Authorization", "Bearer "+k)
		}
		resp, err := h.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with two Authorization fields: %d, want 401", tc.method, tc.path, resp.StatusCode)
		}
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
}
