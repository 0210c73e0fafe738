package org.apache.rocketmq.client.java.impl.consumer;

import java.util.Map;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.java.hook.MessageInterceptor;

/**
 * rmqflow benchmark peer (not part of the official client): the client's own,
 * unmodified PushConsumerImpl with a message interceptor registered between
 * construction and start, so that the peer sees every receive and ack. The
 * client's PushConsumerBuilder.build() constructs and starts at once, and
 * PushConsumerImpl is package-private, hence this class in the client's
 * package (the peer runs from a plain class-path jar, where that is allowed).
 */
public final class TracedPushConsumer extends PushConsumerImpl {
    private TracedPushConsumer(ClientConfiguration cfg, String group, Map<String, FilterExpression> subs,
        MessageListener listener, int maxCacheMessageCount, int maxCacheMessageSizeInBytes,
        int consumptionThreadCount, MessageInterceptor interceptor) {
        // What PushConsumerBuilderImpl.build() passes by default: no FIFO accelerator (the topic is not FIFO
        // anyway), no interceptor filtering.
        super(cfg, group, subs, listener, maxCacheMessageCount, maxCacheMessageSizeInBytes, consumptionThreadCount,
            false, false);
        addMessageInterceptor(interceptor);
    }

    /** Builds, hooks and starts a push consumer, as PushConsumerBuilder.build() would. */
    public static PushConsumer start(ClientConfiguration cfg, String group, Map<String, FilterExpression> subs,
        MessageListener listener, int maxCacheMessageCount, int maxCacheMessageSizeInBytes,
        int consumptionThreadCount, MessageInterceptor interceptor) {
        TracedPushConsumer c = new TracedPushConsumer(cfg, group, subs, listener, maxCacheMessageCount,
            maxCacheMessageSizeInBytes, consumptionThreadCount, interceptor);
        c.startAsync().awaitRunning();
        return c;
    }
}
