package org.rmqflow.bench.peer;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * Variant {@code simple}: the official SimpleConsumer driven through its
 * asynchronous API. --concurrency loops each keep one {@code receiveAsync}
 * (--batch messages, --invisible, long-polling --await) outstanding at all
 * times: as soon as a receive returns, the loop sends the next one, then
 * handles the batch it got (the --handler-delay sleep, in the loop, per
 * message) and acks each message with {@code ackAsync} without waiting for
 * it. Acks in flight are bounded by a semaphore (default 1024, system
 * property rmqflow.peer.maxAcksInFlight); a loop waits for a permit only when
 * that many acks are unanswered. The client has no batch ack: one AckMessage
 * RPC per message.
 *
 * <p>The peer calls every RPC itself, so it counts receive RPCs, empty
 * receives, ack RPCs and failed acks exactly; it sends no
 * ChangeInvisibleDuration (change_rpcs 0).
 */
final class SimplePeer implements Peer {
    static final String MAX_ACKS = "rmqflow.peer.maxAcksInFlight";
    static final int DEFAULT_MAX_ACKS = 1024;

    private final Flags flags;
    private final Tracker tracker;
    private final List<Thread> threads = new ArrayList<>();
    private final Semaphore acks;
    private final long handlerDelayNanos;
    private volatile boolean running = true;
    private SimpleConsumer consumer;

    SimplePeer(Flags flags, Tracker tracker) {
        this.flags = flags;
        this.tracker = tracker;
        this.acks = new Semaphore(Integer.getInteger(MAX_ACKS, DEFAULT_MAX_ACKS));
        this.handlerDelayNanos = flags.handlerDelay.toNanos();
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
            .setAwaitDuration(flags.await)
            .setSubscriptionExpressions(Map.of(flags.topic, FilterExpression.SUB_ALL))
            .build();
        System.err.printf("java: simple: %d loops, batch %d, invisible %s, await %s, max acks in flight %d%n",
            flags.concurrency, flags.batch, flags.invisible, flags.await, acks.availablePermits());
        for (int i = 0; i < flags.concurrency; i++) {
            Thread t = new Thread(this::loop, "peer-receiver-" + i);
            t.setDaemon(true);
            threads.add(t);
            t.start();
        }
    }

    /** A batch and the time its receive returned. */
    private record Batch(List<MessageView> messages, long at) {
    }

    private CompletableFuture<Batch> receive() {
        return consumer.receiveAsync(flags.batch, flags.invisible)
            .whenComplete((l, e) -> {
                if (e != null) {
                    tracker.receiveFailed();
                }
            })
            .thenApply(l -> {
                long at = tracker.received(l.size());
                for (MessageView mv : l) {
                    tracker.seen(mv.getMessageId().toString(), flags.mineByKeys(mv.getKeys()));
                }
                return new Batch(l, at);
            });
    }

    private void loop() {
        CompletableFuture<Batch> next = receive();
        while (running) {
            Batch b;
            try {
                b = next.get();
            } catch (ExecutionException e) {
                if (running) {
                    System.err.println("java: receive: " + e.getCause());
                    sleep(200);
                    next = receive();
                }
                continue;
            } catch (InterruptedException e) {
                return;
            }
            if (!running) {
                return;
            }
            next = receive();
            for (MessageView mv : b.messages()) {
                if (handlerDelayNanos > 0) {
                    sleepNanos(handlerDelayNanos);
                }
                acks.acquireUninterruptibly();
                long at = b.at();
                consumer.ackAsync(mv).whenComplete((v, e) -> {
                    acks.release();
                    tracker.ackRpc();
                    if (e != null) {
                        if (running) {
                            tracker.ackFailed(1);
                            System.err.println("java: ack " + mv.getMessageId() + ": " + e);
                        }
                        return;
                    }
                    tracker.acked(mv.getMessageId().toString(), flags.mineByKeys(mv.getKeys()), at,
                        mv.getBornTimestamp(), null);
                });
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

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void sleepNanos(long nanos) {
        try {
            Thread.sleep(nanos / 1_000_000, (int) (nanos % 1_000_000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
