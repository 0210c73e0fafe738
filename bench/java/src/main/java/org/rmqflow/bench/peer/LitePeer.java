package org.rmqflow.bench.peer;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.java.hook.MessageHookPoints;
import org.apache.rocketmq.client.java.hook.MessageHookPointsStatus;
import org.apache.rocketmq.client.java.hook.MessageInterceptor;
import org.apache.rocketmq.client.java.hook.MessageInterceptorContext;
import org.apache.rocketmq.client.java.impl.consumer.LitePushConsumerBuilderImpl;
import org.apache.rocketmq.client.java.impl.consumer.LitePushConsumerImpl;
import org.apache.rocketmq.client.java.message.GeneralMessage;

/**
 * Lite mode: the official LitePushConsumer (client 5.2.0 has no
 * LiteSimpleConsumer), bound to --topic in the wildcard group --group, with
 * --concurrency consumption threads and a listener that returns SUCCESS, after
 * which the client acks the message (one AckMessage RPC per message).
 *
 * <p>A push consumer receives and acks on its own threads, so the peer watches
 * it through the client's message interceptor hook (the one its metrics use):
 * RECEIVE tells when each message arrived, ACK when each ack was sent and
 * answered. The interceptor is registered before the consumer starts, so no
 * ack goes unseen; the consumer itself is the client's unmodified
 * LitePushConsumerImpl.
 */
final class LitePeer implements Peer {
    /**
     * System property: when true, the consumer sends the client's periodic
     * COMPLETE_ADD lite subscription sync once right after it starts, instead
     * of first 30 s later (see bench/README.md). Off by default.
     */
    static final String SYNC_AT_START = "rmqflow.peer.liteSyncAtStart";

    private final Flags flags;
    private final Tracker tracker;
    private final Map<String, Long> receivedAt = new ConcurrentHashMap<>();
    private LitePushConsumer consumer;

    LitePeer(Flags flags, Tracker tracker) {
        this.flags = flags;
        this.tracker = tracker;
    }

    @Override
    public void start() throws Exception {
        ClientConfiguration cfg = ClientConfiguration.newBuilder()
            .setEndpoints(flags.endpoint)
            .enableSsl(false)
            .build();
        TracedBuilder b = new TracedBuilder(new Watcher());
        b.bindTopic(flags.topic)
            .setClientConfiguration(cfg)
            .setConsumerGroup(flags.group)
            .setConsumptionThreadCount(flags.concurrency)
            .setMessageListener(mv -> ConsumeResult.SUCCESS);
        consumer = b.build();
    }

    @Override
    public void close() throws Exception {
        if (consumer != null) {
            consumer.close();
        }
    }

    /** Feeds the tracker from the client's RECEIVE and ACK hook points. */
    private final class Watcher implements MessageInterceptor {
        @Override
        public void doBefore(MessageInterceptorContext ctx, List<GeneralMessage> msgs) {
            if (ctx.getMessageHookPoints() == MessageHookPoints.ACK) {
                tracker.ackRpc();
            }
        }

        @Override
        public void doAfter(MessageInterceptorContext ctx, List<GeneralMessage> msgs) {
            MessageHookPoints point = ctx.getMessageHookPoints();
            if (point == MessageHookPoints.RECEIVE) {
                long at = tracker.received(msgs.size());
                for (GeneralMessage m : msgs) {
                    m.getMessageId().ifPresent(id -> receivedAt.put(id.toString(), at));
                }
            } else if (point == MessageHookPoints.ACK && ctx.getStatus() == MessageHookPointsStatus.OK) {
                for (GeneralMessage m : msgs) {
                    if (m.getMessageId().isEmpty()) {
                        continue;
                    }
                    String id = m.getMessageId().get().toString();
                    Long at = receivedAt.remove(id);
                    tracker.acked(id, flags.mineByLiteTopic(m.getLiteTopic().orElse(null)), at == null ? 0 : at);
                }
            }
        }
    }

    /**
     * The client's own builder, except that it registers an interceptor on
     * the consumer between construction and start (build() in the client does
     * both at once).
     */
    private static final class TracedBuilder extends LitePushConsumerBuilderImpl {
        private final MessageInterceptor interceptor;

        TracedBuilder(MessageInterceptor interceptor) {
            this.interceptor = interceptor;
        }

        @Override
        public LitePushConsumer build() {
            if (clientConfiguration == null || consumerGroup == null || messageListener == null || bindTopic == null) {
                throw new IllegalStateException("clientConfiguration, consumerGroup, messageListener and bindTopic must be set");
            }
            subscriptionExpressions = Map.of(bindTopic, FilterExpression.SUB_ALL);
            TracedConsumer c = new TracedConsumer(this, interceptor);
            c.startAsync().awaitRunning();
            if (Boolean.getBoolean(SYNC_AT_START)) {
                c.syncNow();
            }
            return c;
        }
    }

    private static final class TracedConsumer extends LitePushConsumerImpl {
        TracedConsumer(LitePushConsumerBuilderImpl b, MessageInterceptor interceptor) {
            super(b);
            addMessageInterceptor(interceptor);
        }

        /** The client's own periodic COMPLETE_ADD of the lite subscription, once, now. */
        void syncNow() {
            try {
                syncAllLiteSubscription();
            } catch (Exception e) {
                System.err.println("java: lite subscription sync at start: " + e);
            }
        }
    }
}
