package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"smsgw/internal/httpapi"
)

// postKeys posts body to path with the Idempotency-Key header once per
// key (the harness's header map holds one value a name).
func (h *harness) postKeys(path, key string, body any, idemKeys ...string) reply {
	h.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	hr, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.base+path, bytes.NewReader(raw))
	if err != nil {
		h.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+key)
	for _, k := range idemKeys {
		hr.Header.Add("Idempotency-Key", k)
	}
	resp, err := h.client.Do(hr)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	out := reply{status: resp.StatusCode, header: resp.Header, body: b}
	checkSpec(h.t, hr, out)
	return out
}

// An Idempotency-Key sent twice is a 400 naming the header, on every
// endpoint that takes one, whether the values differ or not: nothing is
// sent, queued or kept under either key, so a later request with one of
// them is answered as a first request.
func TestIdempotencyKeyTwiceRefused(t *testing.T) {
	otpBody := map[string]any{"to": "+819012345678", "body": "code 1234"}
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			cases := []struct {
				path, key string
				body      any
				ok        int
			}{
				{"/v1/messages", keyNotify, msg("transactional"), http.StatusAccepted},
				{"/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional")}}, http.StatusOK},
				{"/v1/otp", keyLogin, otpBody, http.StatusOK},
			}
			for _, c := range cases {
				for _, keys := range [][]string{{"k-first", "k-second"}, {"k-same", "k-same"}} {
					r := h.postKeys(c.path, c.key, c.body, keys...)
					wantProblem(t, r, http.StatusBadRequest, httpapi.KindInvalid, "Idempotency-Key")
				}
			}
			if n := len(h.sim.Accepted()); n != 0 {
				t.Errorf("%d sends after refused requests", n)
			}
			if st := h.stats(); st.Classes["transactional"].Ready+st.Classes["transactional"].Leased != 0 {
				t.Errorf("refused requests queued messages: %+v", st.Classes["transactional"])
			}
			for _, c := range cases {
				for _, k := range []string{"k-first", "k-second", "k-same"} {
					r := h.postKeys(c.path, c.key, c.body, k)
					wantStatus(t, r, c.ok)
					if r.header.Get("Idempotent-Replayed") != "" {
						t.Errorf("%s with key %s: replayed an answer kept for a refused request", c.path, k)
					}
				}
			}
		})
	}
}
