package rmqfake

// This file emulates the proxy's auto renewal of receives sent with
// auto_renew=true (what the official push consumers send): the proxy pops
// with 60 s and renews each message in the background until it is acked,
// changed or forwarded, for at most 3 h since the receive
// (DefaultReceiptHandleManager, renewMaxTimeMillis); the client only ever
// sees the handle of the receive, which keeps working because the proxy
// swaps in its latest renewed handle. When the client terminates, or its
// channel expires (SessionExpiry after its stream ended: the proxy does
// nothing when a stream ends), every message it holds becomes visible again
// 1 s later (invisibleTimeMillisWhenClear). rmqfake pops such a receive with the
// whole 3 h at once, which a client cannot tell from a renewal, and keeps
// the handles so that a departing client's messages come back. Lite
// messages are the exception: the proxy records them for renewal without
// their lite topic, so its renewals and its clear take the broker's
// non-lite path and never reach the lite topic; they keep the pop's 60 s
// (conformance scenario z).

const (
	// autoRenewMax is how long an auto-renewed message stays invisible (ms).
	autoRenewMax = 3 * 60 * 60 * 1000
	// clearInvisible is the invisibility a departing client's auto-renewed
	// messages get (ms).
	clearInvisible = 1000
	// maxLiteRenewPerClient is the most auto-renewed, unacked messages a
	// lite push consumer may hold before its receives are refused
	// (maxLiteRenewNumPerChannel).
	maxLiteRenewPerClient = 100
	// renewPopInvisible is the invisibility the proxy pops an auto_renew
	// receive with (ms): what a message is left with when its renewal
	// stops without the ack, change or forward settling it.
	renewPopInvisible = 60_000
)

// renewal is one auto-renewed message a client holds.
type renewal struct {
	client string
	group  resKey
	topic  resKey
	lite   string
	h      handle
}

// holdRenewed records the messages an auto_renew receive is about to deliver
// to its client (before they are written, as the proxy does: a stream that
// breaks part-way nacks the rest, and nack forgets them). Call it with b.mu
// held.
func (b *broker) holdRenewed(r *popRequest, ds []delivered) {
	if b.renewed == nil {
		b.renewed = map[string]*renewal{}
		b.renewCount = map[string]int{}
	}
	if b.renewCount[r.clientID] >= 1024 {
		b.purgeRenewals(r.clientID)
	}
	for _, d := range ds {
		k := d.handle.String()
		if _, dup := b.renewed[k]; dup {
			continue
		}
		b.renewed[k] = &renewal{client: r.clientID, group: r.group, topic: r.topic, lite: d.m.lite, h: d.handle}
		b.renewCount[r.clientID]++
	}
}

// stopRenewal forgets an auto-renewed handle that an ack, change or
// forward of group gk names (the proxy keys its renewals by client channel
// and group: a request naming another group leaves it renewing), and
// returns it. Call it with b.mu held.
func (b *broker) stopRenewal(handle string, gk resKey) *renewal {
	rn := b.renewed[handle]
	if rn == nil || rn.group != gk {
		return nil
	}
	b.dropRenewal(handle, rn)
	return rn
}

func (b *broker) dropRenewal(handle string, rn *renewal) {
	delete(b.renewed, handle)
	if b.renewCount[rn.client]--; b.renewCount[rn.client] <= 0 {
		delete(b.renewCount, rn.client)
	}
}

// unsettled gives a message whose renewal stopped without the request
// settling it the invisibility the proxy would have left it with (see
// renewedUntil), not the rest of rmqfake's 3 h: the request failed, or it
// was an ack or change of a lite message that named no lite topic, which
// the 5.5.0 broker does not apply to the lite topic (conformance scenario
// y; the official Java LitePushConsumer's nack). Call it with b.mu held.
func (b *broker) unsettled(rn *renewal) {
	now := b.nowMS()
	if rn == nil || rn.h.expired(now) {
		return
	}
	end := renewedUntil(rn.h.popTime, now)
	if rn.lite != "" {
		// The 5.5.0 proxy records a lite message for renewal without its
		// lite topic (ReceiveMessageActivity: the 7-argument
		// MessageReceiptHandle), so its renewals take the broker's non-lite
		// path too and never reach the lite topic: only the pop's 60 s hold.
		end = rn.h.popTime + renewPopInvisible
	}
	_, _ = b.changeInvisible(rn.group, rn.topic, rn.lite, rn.h, max(end-now, 0), false)
}

// renewSteps are the invisibilities the proxy's renewals give one after
// another (RenewStrategyPolicy: 1, 3, 5, 10, 30 min, then 1 h).
var renewSteps = []int64{60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000}

// renewAhead is how long before a renewed message's invisibility ends the
// proxy renews it (ms; renewAheadTimeMillis).
const renewAhead = 10_000

// renewedUntil is when the invisibility of a message popped at popTime with
// auto_renew ends, as the proxy has renewed it by now (ms): the pop's 60 s,
// each renewal renewAhead before the end, for the next of renewSteps. The
// proxy's scan runs every 5 s, so it renews up to 5 s later than this.
func renewedUntil(popTime, now int64) int64 {
	end := popTime + renewPopInvisible
	for i := 0; now >= end-renewAhead; i++ {
		end += renewSteps[min(i, len(renewSteps)-1)] - renewAhead
	}
	return end
}

// purgeRenewals forgets client's renewals whose 3 h are over (the message
// is visible again: redelivered, or acked by someone else). Call it with
// b.mu held.
func (b *broker) purgeRenewals(client string) {
	now := b.nowMS()
	for k, rn := range b.renewed {
		if rn.client == client && rn.h.expired(now) {
			b.dropRenewal(k, rn)
		}
	}
}

// clearRenewals makes every message client holds by an auto-renewed receive
// visible again in a second, as the proxy does when the client is gone.
// Call it with b.mu held.
func (b *broker) clearRenewals(client string) {
	if b.renewCount[client] == 0 {
		return
	}
	for k, rn := range b.renewed {
		if rn.client != client {
			continue
		}
		b.dropRenewal(k, rn)
		// The proxy clears through the same changeInvisibleTime as its
		// renewals, without the lite topic: a lite message keeps the pop's
		// 60 s.
		if rn.lite == "" && !rn.h.expired(b.nowMS()) {
			_, _ = b.changeInvisible(rn.group, rn.topic, rn.lite, rn.h, clearInvisible, false)
		}
	}
}
