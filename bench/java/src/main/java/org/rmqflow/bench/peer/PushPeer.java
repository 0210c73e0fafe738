package org.rmqflow.bench.peer;

import java.util.Map;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.java.impl.consumer.TracedPushConsumer;

/**
 * Variant {@code push}: the official PushConsumer on a normal topic, with
 * max(--concurrency, 20) consumption threads ({@link #threads}) and a listener that returns SUCCESS
 * (after the --handler-delay sleep), after which the client acks the message
 * asynchronously (one AckMessage RPC per message, not waited for by the
 * consumption thread). The client keeps one receive in flight per assigned
 * queue, each asking for min(the broker's batch size, the room left in that
 * queue's share of the cache); it renews invisibility itself (auto_renew), and
 * the long-polling timeout is the broker's, so --batch, --invisible and
 * --await do not apply.
 *
 * <p>Cache: maxCacheMessageCount (system property
 * rmqflow.peer.maxCacheMessageCount, default {@value #DEFAULT_CACHE_COUNT})
 * and maxCacheMessageSizeInBytes (rmqflow.peer.maxCacheMessageSizeInBytes,
 * default the client's 64 MiB), shared between the assigned queues.
 */
final class PushPeer implements Peer {
    static final int DEFAULT_CACHE_COUNT = 1024;
    static final int DEFAULT_CACHE_BYTES = 64 << 20;

    private final Flags flags;
    private final Tracker tracker;
    private PushConsumer consumer;

    PushPeer(Flags flags, Tracker tracker) {
        this.flags = flags;
        this.tracker = tracker;
    }

    /** The listener of both push variants: the handler delay, then SUCCESS. */
    static MessageListener listener(Flags flags) {
        long delay = flags.handlerDelay.toNanos();
        if (delay == 0) {
            return mv -> ConsumeResult.SUCCESS;
        }
        return mv -> {
            SimplePeer.sleepNanos(delay);
            return ConsumeResult.SUCCESS;
        };
    }

    /**
     * The push consumers' consumption threads: --concurrency, never below the
     * client's own default of 20 (the Go peer does the same, where each
     * consumption goroutine waits for its ack RPC; here acks are async, the
     * floor is kept for symmetry).
     */
    static int threads(Flags flags) {
        return Math.max(flags.concurrency, 20);
    }

    static int cacheCount(int def) {
        return Integer.getInteger("rmqflow.peer.maxCacheMessageCount", def);
    }

    static int cacheBytes() {
        return Integer.getInteger("rmqflow.peer.maxCacheMessageSizeInBytes", DEFAULT_CACHE_BYTES);
    }

    @Override
    public void start() throws Exception {
        ClientConfiguration cfg = ClientConfiguration.newBuilder()
            .setEndpoints(flags.endpoint)
            .enableSsl(false)
            .build();
        Watcher w = new Watcher(tracker, m -> flags.mineByKeys(m.getKeys()), false);
        System.err.printf("java: push: %d consumption threads, maxCacheMessageCount %d, maxCacheMessageSizeInBytes %d%n",
            threads(flags), cacheCount(DEFAULT_CACHE_COUNT), cacheBytes());
        consumer = TracedPushConsumer.start(cfg, flags.group, Map.of(flags.topic, FilterExpression.SUB_ALL),
            listener(flags), cacheCount(DEFAULT_CACHE_COUNT), cacheBytes(), threads(flags), w);
    }

    @Override
    public void close() throws Exception {
        if (consumer != null) {
            consumer.close();
        }
    }
}
