package org.rmqflow.bench.peer;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Predicate;
import org.apache.rocketmq.client.java.hook.MessageHookPoints;
import org.apache.rocketmq.client.java.hook.MessageHookPointsStatus;
import org.apache.rocketmq.client.java.hook.MessageInterceptor;
import org.apache.rocketmq.client.java.hook.MessageInterceptorContext;
import org.apache.rocketmq.client.java.message.GeneralMessage;

/**
 * Feeds the tracker from a push consumer's message interceptor hooks (the
 * ones the client's own metrics use). RECEIVE: after every ReceiveMessage RPC
 * (one per process queue at a time), with the messages it brought (none: an
 * empty receive; status ERROR: a failed one). ACK: after every AckMessage RPC,
 * retries included, with its one message and whether the broker said OK
 * (not OK: an ack failure). CHANGE_INVISIBLE_DURATION: after every
 * ChangeInvisibleDuration RPC the client sends (a nack of a failed
 * consumption); the proxy's own renewals of push consumers' messages are not
 * RPCs of the client and are not seen. Every message a receive brought is a
 * receipt (Tracker.seen: a message received before is redelivered).
 */
final class Watcher implements MessageInterceptor {
    private final Tracker tracker;
    private final Predicate<GeneralMessage> mine;
    private final boolean lite;
    private final Map<String, Long> receivedAt = new ConcurrentHashMap<>();

    Watcher(Tracker tracker, Predicate<GeneralMessage> mine, boolean lite) {
        this.tracker = tracker;
        this.mine = mine;
        this.lite = lite;
    }

    @Override
    public void doBefore(MessageInterceptorContext ctx, List<GeneralMessage> msgs) {
    }

    @Override
    public void doAfter(MessageInterceptorContext ctx, List<GeneralMessage> msgs) {
        MessageHookPoints point = ctx.getMessageHookPoints();
        if (point == MessageHookPoints.RECEIVE) {
            if (ctx.getStatus() != MessageHookPointsStatus.OK) {
                tracker.receiveFailed();
                return;
            }
            long at = tracker.received(msgs.size());
            for (GeneralMessage m : msgs) {
                m.getMessageId().ifPresent(id -> {
                    receivedAt.put(id.toString(), at);
                    tracker.seen(id.toString(), mine.test(m));
                });
            }
        } else if (point == MessageHookPoints.CHANGE_INVISIBLE_DURATION) {
            tracker.changeRpc();
        } else if (point == MessageHookPoints.ACK) {
            tracker.ackRpc();
            if (ctx.getStatus() != MessageHookPointsStatus.OK) {
                tracker.ackFailed(msgs.size());
                return;
            }
            for (GeneralMessage m : msgs) {
                if (m.getMessageId().isEmpty()) {
                    continue;
                }
                String id = m.getMessageId().get().toString();
                Long at = receivedAt.remove(id);
                tracker.acked(id, mine.test(m), at == null ? 0 : at, m.getBornTimestamp().orElse(0L),
                    lite ? m.getLiteTopic().orElse("") : null);
            }
        }
    }
}
