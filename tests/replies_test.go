package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider/httpprov"
	"smsgw/internal/redistest"
)

// The secret the provider signs inbound messages with.
const inboundSecret = "e2e-inbound-secret-0000"

// postReply posts recipient i's reply (the provider's id mo-i) to gw as the
// provider would, signed; it reports whether gw answered 2xx (the provider
// retries anything else).
func postReply(t *testing.T, gw *gwProc, i int) bool {
	t.Helper()
	raw, _ := json.Marshal(httpprov.InboundBody{ID: fmt.Sprintf("mo-%d", i), From: phone(i), Text: fmt.Sprintf("reply %d", i),
		At: time.Now().UTC().Truncate(time.Second)})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/inbound/http", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(httpprov.HeaderInboundSignature, httpprov.SignInbound(inboundSecret, raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false // the replica died mid-request
	}
	_ = resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// replyEvents are the message.received events the sink got, by reply id:
// their webhook-ids, and whether one was acknowledged.
func (s *hookSink) replyEvents(t *testing.T) (ids map[string]map[string]bool, acked int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids = map[string]map[string]bool{}
	for rid, evs := range s.byMessage {
		if !strings.HasPrefix(rid, "rcv_") {
			continue
		}
		ids[rid] = evs
		for id := range evs {
			if s.ok[id] > 0 {
				acked++
				break
			}
		}
	}
	return ids, acked
}

// checkReplies asserts that n replies each reached the sink as exactly one
// event (one webhook-id), of type message.received, with one body on every
// attempt and a valid signature, the text of the recipient who sent it.
func (s *hookSink) checkReplies(t *testing.T, n int) {
	t.Helper()
	ids, acked := s.replyEvents(t)
	if len(ids) != n || acked != n {
		t.Fatalf("%d replies reached the producer (%d acknowledged), want %d", len(ids), acked, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.badSig != 0 {
		t.Errorf("%d deliveries with a signature the producer could not verify", s.badSig)
	}
	texts := map[string]bool{}
	for rid, evs := range ids {
		if len(evs) != 1 {
			t.Errorf("reply %s: %d event ids, want one", rid, len(evs))
		}
		for id := range evs {
			bodies := s.bodies[id]
			for _, b := range bodies[1:] {
				if b != bodies[0] {
					t.Errorf("event %s: attempts with different bodies", id)
				}
			}
			var ev struct {
				Type string
				Data struct{ From, Text string }
			}
			_ = json.Unmarshal([]byte(bodies[0]), &ev)
			if ev.Type != "message.received" || s.types[id] != "message.received" {
				t.Errorf("event %s: type %q", id, ev.Type)
			}
			texts[ev.Data.From+" "+ev.Data.Text] = true
		}
	}
	for i := range n {
		if !texts[fmt.Sprintf("%s reply %d", phone(i), i)] {
			t.Errorf("recipient %d's reply missing or not its own", i)
		}
	}
}

// sendReplies posts n replies, recipient i's to gws[i%len(gws)]; a reply
// not answered 2xx is sent again, to the first gateway (the provider
// retries; the load balancer finds a live replica). kill, when set, runs
// after the reply at index killAt was acknowledged and returns the gateways
// left. It returns how many replies were sent again.
func sendReplies(t *testing.T, gws []*gwProc, n, killAt int, kill func() []*gwProc) (retried int) {
	t.Helper()
	for i := range n {
		gw := gws[i%len(gws)]
		for !postReply(t, gw, i) {
			retried++
			gw = gws[0]
			time.Sleep(50 * time.Millisecond)
		}
		if i == killAt && kill != nil {
			gws = kill()
		}
	}
	return retried
}

// replyRig is a producer endpoint (notify's webhook, failing every first
// attempt), a simulator and the options of gateways on redisAddr (empty:
// embedded) that take inbound messages signed with inboundSecret.
func replyRig(t *testing.T, redisAddr, account string) (*hookSink, *simProc, gwOptions) {
	t.Helper()
	t.Setenv("SMSGW_PROVIDER_RECEIPT_SECRET", inboundSecret)
	sink := newHookSink(t)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	ne, extra := callbackOptions(sink)
	return sink, sim, gwOptions{RedisAddr: redisAddr, Account: account, SimURL: sim.URL, Lease: 2 * time.Second, NotifyExtra: ne, Extra: extra}
}

// messageRecipients has notify message recipients 0..n-1 through gw and
// waits until each is sent and its status event delivered.
func messageRecipients(t *testing.T, gw *gwProc, sim *simProc, sink *hookSink, n int) {
	t.Helper()
	postBatch(t, gw, keyTxn, "transactional", 0, n)
	sim.WaitAccepted(t, n, 60*time.Second)
	waitUntil(t, "every message's status event", 60*time.Second, func() bool { return sink.delivered() >= n })
}

// waitReplies waits until n replies were acknowledged by the producer,
// then a second more for a late duplicate, and checks them.
func (s *hookSink) waitReplies(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, "every reply delivered", 60*time.Second, func() bool { _, acked := s.replyEvents(t); return acked == n })
	time.Sleep(time.Second) // a late duplicate would arrive now
	s.checkReplies(t, n)
}

// Two replicas on Redis: 20 recipients messaged by notify reply, half of
// the replies through the replica that is killed with SIGKILL while it
// delivers them (every first attempt refused by the producer's endpoint):
// every reply reaches notify exactly once (one webhook-id, one body),
// signed, none lost.
func TestRepliesSurviveAKilledReplica(t *testing.T) {
	skipShort(t)
	sink, sim, o := replyRig(t, redistest.Addr(t), redistest.Prefix(t))
	a, b := startGateway(t, "gwa", o), startGateway(t, "gwb", o)
	const n = 20
	messageRecipients(t, a, sim, sink, n)
	start := time.Now()
	pending := 0 // replies the gateways had acknowledged but the producer not yet, at the kill
	retried := sendReplies(t, []*gwProc{a, b}, n, n/2+1, func() []*gwProc {
		b.Kill()
		_, acked := sink.replyEvents(t)
		pending = n/2 + 2 - acked
		return []*gwProc{a}
	})
	sink.waitReplies(t, n)
	t.Logf("redis, 2 replicas, gwb killed after reply %d with %d acknowledged replies not yet delivered: %d/%d replies delivered once in %s; %d posts the provider sent again",
		n/2+1, pending, n, n, time.Since(start).Round(time.Millisecond), retried)
}

// The embedded store: the replica killed with SIGKILL after half the
// replies, restarted on its store; the provider sends again what got no
// answer: every reply reaches notify exactly once.
func TestRepliesSurviveARestartEmbedded(t *testing.T) {
	skipShort(t)
	sink, sim, o := replyRig(t, "", "main")
	dir, addr := t.TempDir(), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	gw := startGatewayIn(t, "gw1", addr, dir, o)
	const n = 16
	messageRecipients(t, gw, sim, sink, n)
	start := time.Now()
	pending := 0
	retried := sendReplies(t, []*gwProc{gw}, n, n/2, func() []*gwProc {
		gw.Kill()
		_, acked := sink.replyEvents(t)
		pending = n/2 + 1 - acked
		gw = startGatewayIn(t, "gw2", addr, dir, o)
		return []*gwProc{gw}
	})
	sink.waitReplies(t, n)
	t.Logf("embedded, killed after reply %d with %d acknowledged replies not yet delivered, restarted: %d/%d replies delivered once in %s; %d posts sent again",
		n/2, pending, n, n, time.Since(start).Round(time.Millisecond), retried)
}
