package org.rmqflow.bench.peer;

import java.util.Map;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.java.hook.MessageInterceptor;
import org.apache.rocketmq.client.java.impl.consumer.LitePushConsumerBuilderImpl;
import org.apache.rocketmq.client.java.impl.consumer.LitePushConsumerImpl;

/**
 * Variant {@code lite-push}: the official LitePushConsumer (client 5.2.0 has
 * no LiteSimpleConsumer), bound to --topic in the wildcard group --group, with
 * max(--concurrency, 20) consumption threads (PushPeer.threads) and a listener that returns SUCCESS
 * (after the --handler-delay sleep), after which the client acks the message
 * (one AckMessage RPC per message). --batch, --invisible and --await do not
 * apply (the client's and broker's).
 *
 * <p>maxCacheMessageCount is {@value #CACHE_COUNT} (system property
 * rmqflow.peer.maxCacheMessageCount): the proxy refuses a lite push
 * consumer's receive (FORBIDDEN, "too many unacked messages") when it holds
 * more than maxLiteRenewNumPerChannel (100) unacked messages, and the client
 * then waits 1 s; with a cache of 100 the client never asks for more than the
 * room under that cap. The lite consumer has one process queue, so the whole
 * cache is that queue's.
 *
 * <p>A push consumer receives and acks on its own threads, so the peer watches
 * it through the client's message interceptor hook ({@link Watcher}),
 * registered on an unmodified LitePushConsumerImpl between construction and
 * start, so that no receive or ack goes unseen.
 */
final class LitePeer implements Peer {
    /**
     * System property: when true (the default), the consumer sends the
     * client's periodic COMPLETE_ADD lite subscription sync once right after
     * it starts, instead of first 30 s later, as client 5.2.1 does
     * (LiteSubscriptionManager.startUp); false leaves 5.2.0 as shipped. See
     * bench/README.md.
     */
    static final String SYNC_AT_START = "rmqflow.peer.liteSyncAtStart";

    /** The proxy's default maxLiteRenewNumPerChannel. */
    static final int CACHE_COUNT = 100;

    private final Flags flags;
    private final Tracker tracker;
    private LitePushConsumer consumer;

    LitePeer(Flags flags, Tracker tracker) {
        this.flags = flags;
        this.tracker = tracker;
    }

    static boolean syncAtStart() {
        return Boolean.parseBoolean(System.getProperty(SYNC_AT_START, "true"));
    }

    @Override
    public void start() throws Exception {
        ClientConfiguration cfg = ClientConfiguration.newBuilder()
            .setEndpoints(flags.endpoint)
            .enableSsl(false)
            .build();
        Watcher w = new Watcher(tracker, m -> flags.mineByLiteTopic(m.getLiteTopic().orElse(null)), true);
        System.err.printf("java: lite-push: %d consumption threads, maxCacheMessageCount %d, "
                + "maxCacheMessageSizeInBytes %d, sync at start %b%n",
            PushPeer.threads(flags), PushPeer.cacheCount(CACHE_COUNT), PushPeer.cacheBytes(), syncAtStart());
        TracedBuilder b = new TracedBuilder(w);
        b.bindTopic(flags.topic)
            .setClientConfiguration(cfg)
            .setConsumerGroup(flags.group)
            .setConsumptionThreadCount(PushPeer.threads(flags))
            .setMaxCacheMessageCount(PushPeer.cacheCount(CACHE_COUNT))
            .setMaxCacheMessageSizeInBytes(PushPeer.cacheBytes())
            .setMessageListener(PushPeer.listener(flags));
        consumer = b.build();
    }

    @Override
    public void close() throws Exception {
        if (consumer != null) {
            consumer.close();
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
            if (syncAtStart()) {
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
