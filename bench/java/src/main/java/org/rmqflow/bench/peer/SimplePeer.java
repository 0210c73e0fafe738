package org.rmqflow.bench.peer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * Normal mode: the official SimpleConsumer, --concurrency threads each
 * receiving up to 32 messages (invisible 60 s) and acking them one by one, one
 * AckMessage RPC per message.
 */
final class SimplePeer implements Peer {
    static final int BATCH = 32;
    static final Duration INVISIBLE = Duration.ofSeconds(60);
    static final Duration AWAIT = Duration.ofSeconds(5);

    private final Flags flags;
    private final Tracker tracker;
    private final List<Thread> threads = new ArrayList<>();
    private volatile boolean running = true;
    private SimpleConsumer consumer;

    SimplePeer(Flags flags, Tracker tracker) {
        this.flags = flags;
        this.tracker = tracker;
    }

    @Override
    public void start() throws Exception {
        ClientConfiguration cfg = ClientConfiguration.newBuilder()
            .setEndpoints(flags.endpoint)
            .enableSsl(false)
            .build();
        consumer = ClientServiceProvider.loadService().newSimpleConsumerBuilder()
            .setClientConfiguration(cfg)
            .setConsumerGroup(flags.group)
            .setAwaitDuration(AWAIT)
            .setSubscriptionExpressions(Map.of(flags.topic, FilterExpression.SUB_ALL))
            .build();
        for (int i = 0; i < flags.concurrency; i++) {
            Thread t = new Thread(this::loop, "peer-receiver-" + i);
            t.setDaemon(true);
            threads.add(t);
            t.start();
        }
    }

    private void loop() {
        while (running) {
            List<MessageView> batch;
            try {
                batch = consumer.receive(BATCH, INVISIBLE);
            } catch (Exception e) {
                if (running) {
                    System.err.println("java: receive: " + e);
                    sleep(200);
                }
                continue;
            }
            long at = tracker.received(batch.size());
            for (MessageView mv : batch) {
                tracker.ackRpc();
                try {
                    consumer.ack(mv);
                } catch (Exception e) {
                    if (running) {
                        System.err.println("java: ack " + mv.getMessageId() + ": " + e);
                    }
                    continue;
                }
                tracker.acked(mv.getMessageId().toString(), flags.mineByKeys(mv.getKeys()), at);
            }
        }
    }

    @Override
    public void close() throws Exception {
        running = false;
        if (consumer != null) {
            consumer.close();
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
