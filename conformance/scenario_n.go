package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// FrozenHandleAfterRenewals (n): a message received with a 10 s invisibility
// is renewed twice (to 15 s, then 20 s) by its receiver; once the ORIGINAL
// 10 s have passed, a client with no session acks it. With the handle the
// message was received with (frozen when it left the process) the ack fails
// with INVALID_RECEIPT_HANDLE ("receipt handle is expired": the proxy checks
// the pop time and invisible time written in the handle itself, whatever
// renewals happened since) and the message comes back, attempt 2, when the
// last renewal ends. With the newest handle the ack is OK and takes. Same on
// lite and normal topics.
func FrozenHandleAfterRenewals(t *testing.T, e *Env) {
	t.Run("lite", func(t *testing.T) {
		t.Parallel()
		frozenHandle(t, e, true)
	})
	t.Run("normal", func(t *testing.T) {
		t.Parallel()
		frozenHandle(t, e, false)
	})
}

func frozenHandle(t *testing.T, e *Env, lite bool) {
	const s = "n"
	run := rmqtest.Unique("n")
	stale, newest := run+"-stale", run+"-newest"
	var c *client.Client
	var req func(time.Duration) client.ReceiveRequest
	var group string
	if lite {
		topic := rmqtest.LiteTopic(s)
		group, c = rmqtest.LiteGroup(s), e.LiteConsumer(t, s)
		p := e.Producer(t, topic)
		SendLite(t, p, topic, stale, stale)
		SendLite(t, p, topic, newest, newest)
		req = func(d time.Duration) client.ReceiveRequest { return LiteReq(s, d) }
	} else {
		topic := rmqtest.NormalTopic(s)
		group, c = rmqtest.NormalGroup(s), e.NormalConsumer(t, s)
		p := e.Producer(t, topic)
		SendNormal(t, p, topic, run, stale)
		SendNormal(t, p, topic, run, newest)
		req = func(d time.Duration) client.ReceiveRequest { return NormalReq(s, d) }
	}
	other := e.Client(t) // no session: a process that only acks (scenario j)
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, req(MinInvisible), OfRun(run), 2)
	t0 := time.Now()
	if len(got) != 2 {
		t.Fatalf("received %d of 2", len(got))
	}
	frozen := map[string]string{} // body -> handle as received
	latest := map[string]string{} // body -> handle after the renewals
	msgs := map[string]*client.ReceivedMessage{}
	for _, m := range got {
		b := string(m.Body)
		msgs[b], frozen[b] = m, m.ReceiptHandle
		h1 := changeTo(t, c, group, m, m.ReceiptHandle, 15*time.Second)
		latest[b] = changeTo(t, c, group, m, h1, 20*time.Second)
	}
	// The broker's clock, not an event: wait until the original invisibility
	// (10 s from receipt) has surely passed, the renewed one (20 s) not.
	time.Sleep(time.Until(t0.Add(MinInvisible + 1500*time.Millisecond)))
	err := AckHandle(t, other, group, msgs[stale], frozen[stale])
	if Code(err) != client.CodeInvalidReceiptHandle || !strings.Contains(err.Error(), "receipt handle is expired") {
		t.Errorf("ack with the handle as received, after its own invisibility but inside the renewed one: %v, want INVALID_RECEIPT_HANDLE \"receipt handle is expired\"", err)
	}
	if err := AckHandle(t, other, group, msgs[newest], latest[newest]); err != nil {
		t.Errorf("ack with the newest handle: %v, want OK", err)
	}
	// The failed ack left the message alone: it comes back when the last
	// renewal ends; the newest handle's ack took.
	back := Collect(rmqtest.Context(t, 30*time.Second), t, c, req(30*time.Second), OfRun(run), 1)
	waited := time.Since(t0)
	if len(back) != 1 || string(back[0].Body) != stale {
		t.Fatalf("after the acks got %v, want the %q message back", bodies(back), stale)
	}
	t.Logf("message acked with its stale handle came back %v after receipt, attempt %d", waited.Round(10*time.Millisecond), back[0].DeliveryAttempt)
	if waited < 20*time.Second-time.Second {
		t.Errorf("came back %v after receipt, before its renewed invisibility (20 s) ended", waited)
	}
	if back[0].MessageID != msgs[stale].MessageID || back[0].DeliveryAttempt != 2 {
		t.Errorf("came back as %s attempt %d, want %s attempt 2", back[0].MessageID, back[0].DeliveryAttempt, msgs[stale].MessageID)
	}
	if err := AckOne(t, c, group, back[0]); err != nil {
		t.Error(err)
	}
	Nothing(t, c, req(30*time.Second), OfRun(run), MinInvisible)
}

// changeTo changes m's invisibility with handle h and returns the new handle.
func changeTo(t *testing.T, c *client.Client, group string, m *client.ReceivedMessage, h string, d time.Duration) string {
	t.Helper()
	nh, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
		Group: group, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: h, LiteTopic: m.LiteTopic, InvisibleDuration: d,
	})
	if err != nil || nh == "" || nh == h {
		t.Fatalf("change invisible to %v: handle %q, %v", d, nh, err)
	}
	return nh
}
