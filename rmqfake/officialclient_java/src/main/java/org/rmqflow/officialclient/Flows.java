package org.rmqflow.officialclient;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.OffsetOption;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * The flows. Each one returns null when it saw everything it waited for
 * before the timeout, else what was missing; the facts go into the result
 * map either way (the Go test asserts them).
 */
final class Flows {
    // Fixtures of scripts/rocketmq/fixtures.txt (rmqfake gets the same file).
    static final String NORMAL = "rmqflow-official-java-normal";
    static final String NORMAL_G = "rmqflow-official-java-normal-g";
    static final String FIFO = "rmqflow-official-java-fifo";
    static final String FIFO_G = "rmqflow-official-java-fifo-g";
    static final String DELAY = "rmqflow-official-java-delay";
    static final String DELAY_G = "rmqflow-official-java-delay-g";
    static final String PUSH = "rmqflow-official-push";
    static final String PUSH_G = "rmqflow-official-java-push-g";
    static final String LITE = "rmqflow-official-lite";
    static final String LITE_G = "rmqflow-official-lite-g";
    static final String LITE_FIFO_G = "rmqflow-official-java-lite-g";
    static final String LITE_STD_G = "rmqflow-official-java-litestd-g";
    /** lite-push-retry: messages sent, each failed on its first delivery. */
    static final int RETRY_MESSAGES = 20;
    static final String WILD = "rmqflow-official-java-wild";
    static final String WILD_G = "rmqflow-official-java-wild-g";
    static final int WILD_MESSAGES = 10;
    static final String RECALL_G = "rmqflow-official-java-recall-g";
    static final String TXN = "rmqflow-official-java-txn";
    static final String TXN_G = "rmqflow-official-java-txn-g";
    static final String DLQ = "rmqflow-official-java-dlq";
    static final String DLQ_G = "rmqflow-official-java-dlq-g";
    static final String DLQ_READ_G = "rmqflow-official-java-dlq-read-g";
    static final String DLQ_FIFO = "rmqflow-official-java-dlqfifo";
    static final String DLQ_FIFO_G = "rmqflow-official-java-dlqfifo-g";
    static final String DLQ_FIFO_READ_G = "rmqflow-official-java-dlqfifo-read-g";

    /** producer-simple: messages per kind, the normal message nacked once, the delay. */
    static final int SIMPLE_MESSAGES = 10;
    static final int SIMPLE_NACKED = 3;
    static final int DELAY_MESSAGES = 3;
    static final Duration DELAY_BY = Duration.ofSeconds(3);
    /** push, lite-push: messages sent, and the one the listener fails once (as push_test.go). */
    static final int PUSH_MESSAGES = 30;
    static final int FAIL_ONCE = 7;

    private final List<AutoCloseable> open = Collections.synchronizedList(new ArrayList<>());
    private final ClientServiceProvider provider = ClientServiceProvider.loadService();
    private final ClientConfiguration cfg;
    private final String run;
    private final long deadline;

    Flows(String endpoint, String run, Duration timeout) {
        this.cfg = ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false).build();
        this.run = run;
        this.deadline = System.nanoTime() + timeout.toNanos();
    }

    /** c, closed by closeAll. */
    private <T extends AutoCloseable> T track(T c) {
        open.add(c);
        return c;
    }

    /**
     * Closes every consumer the flow opened, for at most limit: a push
     * consumer's close waits for its receive in flight (a long poll of up to
     * 20 s), which would only slow the test down; the process exits after.
     */
    void closeAll(Duration limit) {
        List<Thread> ts = new ArrayList<>();
        synchronized (open) {
            for (AutoCloseable c : open) {
                Thread t = new Thread(() -> {
                    try {
                        c.close();
                    } catch (Exception e) {
                        System.err.println("java: close: " + e);
                    }
                });
                t.setDaemon(true);
                t.start();
                ts.add(t);
            }
        }
        long end = System.nanoTime() + limit.toNanos();
        for (Thread t : ts) {
            try {
                t.join(Math.max(1, (end - System.nanoTime()) / 1_000_000));
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private long left() {
        return Math.max(0, deadline - System.nanoTime());
    }

    private boolean mine(MessageView mv) {
        return mv.getKeys().contains(run);
    }

    private static String body(MessageView mv) {
        return StandardCharsets.UTF_8.decode(mv.getBody().duplicate()).toString();
    }

    private static int number(MessageView mv) {
        try {
            return Integer.parseInt(body(mv));
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    private MessageBuilder message(String topic, String body) {
        return provider.newMessageBuilder().setTopic(topic).setKeys(run).setBody(body.getBytes(StandardCharsets.UTF_8));
    }

    private Producer producer(String... topics) throws ClientException {
        return provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(topics).build();
    }

    private SimpleConsumer simple(String group, String topic) throws ClientException {
        return track(provider.newSimpleConsumerBuilder().setClientConfiguration(cfg).setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
            .setAwaitDuration(Duration.ofSeconds(10)).build());
    }

    // ---------------------------------------------------------------- producer-simple

    /**
     * producer-simple: a Producer sends DELAY_MESSAGES delay messages (due
     * DELAY_BY after sending), SIMPLE_MESSAGES normal messages and
     * SIMPLE_MESSAGES FIFO messages of one message group (the run id); a
     * SimpleConsumer per topic receives them. The normal consumer nacks
     * message SIMPLE_NACKED once (changeInvisibleDuration 1 s) and acks the
     * rest; the FIFO consumer acks in the order received; the delay consumer
     * records how late (negative: early) each delivery was against the
     * message's delivery timestamp.
     *
     * <p>Facts: normal_attempts (body to the delivery attempts seen),
     * fifo_order (bodies in receive order), fifo_group_ok (every FIFO message
     * carried the run as its message group), delay (per message: body,
     * attempt, lateness_ms, timestamp_ok: the delivery timestamp received is
     * the one sent).
     */
    String producerSimple(Map<String, Object> r) throws Exception {
        Map<Integer, List<Integer>> normal = Collections.synchronizedMap(new TreeMap<>());
        List<Integer> fifo = Collections.synchronizedList(new ArrayList<>());
        List<Map<String, Object>> delay = Collections.synchronizedList(new ArrayList<>());
        boolean[] groupOk = {true};
        Map<String, Long> due = Collections.synchronizedMap(new TreeMap<>());

        SimpleConsumer nc = simple(NORMAL_G, NORMAL);
        SimpleConsumer fc = simple(FIFO_G, FIFO);
        SimpleConsumer dc = simple(DELAY_G, DELAY);
        try (Producer p = producer(NORMAL, FIFO, DELAY)) {
            for (int i = 0; i < DELAY_MESSAGES; i++) {
                long at = System.currentTimeMillis() + DELAY_BY.toMillis();
                due.put(String.valueOf(i), at);
                p.send(message(DELAY, String.valueOf(i)).setDeliveryTimestamp(at).build());
            }
            for (int i = 0; i < SIMPLE_MESSAGES; i++) {
                p.send(message(NORMAL, String.valueOf(i)).build());
            }
            for (int i = 0; i < SIMPLE_MESSAGES; i++) {
                p.send(message(FIFO, String.valueOf(i)).setMessageGroup(run).build());
            }
            CompletableFuture<Void> n = CompletableFuture.runAsync(() -> receive(nc, () -> countDone(normal) == SIMPLE_MESSAGES, mv -> {
                int b = number(mv);
                List<Integer> a = normal.computeIfAbsent(b, k -> Collections.synchronizedList(new ArrayList<>()));
                a.add(mv.getDeliveryAttempt());
                if (b == SIMPLE_NACKED && a.size() == 1) {
                    nc.changeInvisibleDuration(mv, Duration.ofSeconds(1));
                    return;
                }
                nc.ack(mv);
            }));
            CompletableFuture<Void> f = CompletableFuture.runAsync(() -> receive(fc, () -> fifo.size() == SIMPLE_MESSAGES, mv -> {
                fifo.add(number(mv));
                if (!run.equals(mv.getMessageGroup().orElse(null))) {
                    groupOk[0] = false;
                }
                fc.ack(mv);
            }));
            CompletableFuture<Void> d = CompletableFuture.runAsync(() -> receive(dc, () -> delay.size() == DELAY_MESSAGES, mv -> {
                long now = System.currentTimeMillis();

                Long sent = due.get(body(mv));
                Map<String, Object> m = new TreeMap<>();
                m.put("body", body(mv));
                m.put("attempt", mv.getDeliveryAttempt());
                m.put("lateness_ms", sent == null ? null : now - sent);
                m.put("timestamp_ok", sent != null && sent.equals(mv.getDeliveryTimestamp().orElse(null)));
                delay.add(m);
                dc.ack(mv);
            }));
            CompletableFuture.allOf(n, f, d).get(left() + TimeUnit.SECONDS.toNanos(15), TimeUnit.NANOSECONDS);
        }
        r.put("normal_attempts", normal);
        r.put("fifo_order", fifo);
        r.put("fifo_group_ok", groupOk[0]);
        r.put("delay", delay);
        if (countDone(normal) == SIMPLE_MESSAGES && fifo.size() == SIMPLE_MESSAGES && delay.size() == DELAY_MESSAGES) {
            return null;
        }
        return String.format("timeout: normal %d, fifo %d, delay %d received", normal.size(), fifo.size(), delay.size());
    }

    /** How many normal messages were received and acked (a nacked first delivery does not count). */
    private static int countDone(Map<Integer, List<Integer>> attempts) {
        synchronized (attempts) {
            int n = 0;
            for (Map.Entry<Integer, List<Integer>> e : attempts.entrySet()) {
                if (e.getKey() != SIMPLE_NACKED || e.getValue().size() >= 2) {
                    n++;
                }
            }
            return n;
        }
    }

    interface Handler {
        void handle(MessageView mv) throws ClientException;
    }

    interface Done {
        boolean done();
    }

    /** Receives from c until done or the deadline; messages of other runs are acked and ignored. */
    private void receive(SimpleConsumer c, Done done, Handler h) {
        while (!done.done() && left() > 0) {
            try {
                for (MessageView mv : c.receive(16, Duration.ofSeconds(15))) {
                    if (!mine(mv)) {
                        c.ack(mv);
                        continue;
                    }
                    h.handle(mv);
                }
            } catch (ClientException e) {
                System.err.println("java: receive: " + e);
                sleep(200);
            }
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ---------------------------------------------------------------- push, lite-push

    /** What a push consumer's listener saw of this run's messages (as push_test.go's consumption). */
    final class Seen {
        final Map<Integer, List<Integer>> attempts = new TreeMap<>();
        final List<Integer> first = new ArrayList<>();
        final List<Integer> done = new ArrayList<>();
        final List<List<Object>> timeline = new ArrayList<>();
        final long t0 = System.nanoTime();
        final CountDownLatch all = new CountDownLatch(PUSH_MESSAGES);
        /** Bodies "after" and "marker" (lite-push after unsubscribing). */
        final List<String> extra = new ArrayList<>();
        final CountDownLatch marker = new CountDownLatch(1);

        /** Fails message FAIL_ONCE on its first delivery, consumes the rest. */
        MessageListener listener() {
            return mv -> {
                if (!mine(mv)) {
                    return ConsumeResult.SUCCESS;
                }
                int n = number(mv);
                synchronized (this) {
                    if (n < 0) {
                        extra.add(body(mv));
                        if (body(mv).equals("marker")) {
                            marker.countDown();
                        }
                        return ConsumeResult.SUCCESS;
                    }
                    List<Integer> a = attempts.computeIfAbsent(n, k -> new ArrayList<>());
                    if (a.isEmpty()) {
                        first.add(n);
                    }
                    a.add(mv.getDeliveryAttempt());
                    timeline.add(List.of(n, mv.getDeliveryAttempt(), (System.nanoTime() - t0) / 1_000_000));
                    if (n == FAIL_ONCE && a.size() == 1) {
                        return ConsumeResult.FAILURE;
                    }
                    if (!done.contains(n)) {
                        done.add(n);
                        all.countDown();
                    }
                }
                return ConsumeResult.SUCCESS;
            };
        }

        String await(Map<String, Object> r) throws InterruptedException {
            boolean ok = all.await(left(), TimeUnit.NANOSECONDS);
            synchronized (this) {
                r.put("attempts", new TreeMap<>(attempts));
                r.put("first", new ArrayList<>(first));
                r.put("consumed", done.size());
                r.put("timeline", new ArrayList<>(timeline));
                return ok ? null : String.format("timeout: consumed %d of %d", done.size(), PUSH_MESSAGES);
            }
        }
    }

    private void sendNumbered(String topic, String lite) throws Exception {
        try (Producer p = producer(topic)) {
            for (int i = 0; i < PUSH_MESSAGES; i++) {
                MessageBuilder b = message(topic, String.valueOf(i));
                if (lite != null) {
                    b.setLiteTopic(lite);
                }
                p.send(b.build());
            }
        }
    }

    /**
     * push: a PushConsumer (4 consumption threads) on PUSH in a group of its
     * own (PUSH_G, not the Go flow's); PUSH_MESSAGES
     * messages; the listener fails FAIL_ONCE once. Facts: attempts (body to
     * delivery attempts), first (bodies in the order of their first
     * delivery), consumed.
     */
    String push(Map<String, Object> r) throws Exception {
        Seen s = new Seen();
        track(provider.newPushConsumerBuilder().setClientConfiguration(cfg).setConsumerGroup(PUSH_G)
            .setSubscriptionExpressions(Map.of(PUSH, FilterExpression.SUB_ALL))
            .setConsumptionThreadCount(4).setMessageListener(s.listener()).build());
        sendNumbered(PUSH, null);
        return s.await(r);
    }

    /**
     * lite-push: a LitePushConsumer bound to LITE in the (exclusive, not
     * FIFO) lite group LITE_G subscribes the lite topic named by the run
     * (subscribeLite right after start: the client checks the lite quota of
     * the settings answer first), then PUSH_MESSAGES messages go to that lite
     * topic; the listener fails FAIL_ONCE once. One consumption thread: a
     * group that is not FIFO gets the client's standard consume service,
     * where more threads would consume a batch in any order, so only with one
     * are the first deliveries in the order received. Then the consumer
     * subscribes a second lite topic (run + "-m") and unsubscribes the run's
     * (unsubscribeLite); a message sent to the run's lite topic after that
     * ("after") is not delivered, one to the new lite topic ("marker") is.
     * Facts: as push, plus subscribe_tries (subscribeLite calls until it was
     * accepted: it is refused client-side until the settings answer brings
     * the quota), lite_topics (after subscribing), lite_topics_after (after
     * the unsubscribe), after_unsubscribe (the bodies received after it).
     *
     * <p>lite-push-standard is the same with the lite group LITE_G, which is
     * not FIFO: the client then runs its standard consume service and nacks
     * the failed message with ChangeInvisibleDuration (no lite topic in the
     * request), which RocketMQ 5.5.0 does not apply to the lite topic: the
     * message, and everything behind it in the lite topic, waits until the
     * proxy's 60 s pop invisibility ends, past this flow's 60 s, so the test
     * does not run it (lite-push-retry is that case, with its own timing).
     */
    String litePush(Map<String, Object> r, String group) throws Exception {
        Seen s = new Seen();
        r.put("group", group);
        LitePushConsumer c = track(provider.newLitePushConsumerBuilder().bindTopic(LITE).setClientConfiguration(cfg)
            .setConsumerGroup(group).setConsumptionThreadCount(1).setMessageListener(s.listener()).build());
        {
            int tries = 0;
            while (true) {
                tries++;
                try {
                    c.subscribeLite(run);
                    break;
                } catch (ClientException e) {
                    System.err.println("java: subscribeLite " + run + ": " + e);
                    if (left() == 0 || tries >= 50) {
                        r.put("subscribe_tries", tries);
                        r.put("subscribe_error", e.toString());
                        return "subscribeLite failed: " + e;
                    }
                    sleep(200);
                }
            }
            r.put("subscribe_tries", tries);
            r.put("lite_topics", new ArrayList<>(c.getLiteTopicSet()));
            sendNumbered(LITE, run);
            String err = s.await(r);
            if (err != null || group.equals(LITE_G)) {
                return err;
            }
            // Unsubscribe: subscribe a marker lite topic, unsubscribe the
            // run's, then send "after" to the run's and "marker" to the
            // marker's; once the marker is in, "after" must not be.
            String marker = run + "-m";
            c.subscribeLite(marker);
            c.unsubscribeLite(run);
            r.put("lite_topics_after", new ArrayList<>(c.getLiteTopicSet()));
            try (Producer p = producer(LITE)) {
                p.send(message(LITE, "after").setLiteTopic(run).build());
                p.send(message(LITE, "marker").setLiteTopic(marker).build());
            }
            boolean in = s.marker.await(left(), TimeUnit.NANOSECONDS);
            synchronized (s) {
                r.put("after_unsubscribe", new ArrayList<>(s.extra));
            }
            return in ? null : "timeout: the marker lite topic's message was not delivered";
        }
    }

    /**
     * lite-push-retry: a LitePushConsumer bound to LITE in LITE_STD_G, an
     * exact lite group that is not FIFO, so the client runs its standard
     * consume service (4 threads). RETRY_MESSAGES messages go to the lite
     * topic named by the run first; then the consumer subscribes it from its
     * first message (OffsetOption.MIN_OFFSET), so that one receive takes them
     * all. The listener fails each message on its first delivery and
     * consumes it on the next. The 5.2.0 client nacks a failure with a
     * ChangeInvisibleDuration of the retry policy's first delay (1 s) and no
     * lite topic. Facts: attempts (body to delivery attempts), consumed,
     * back_ms (body to ms from its failed delivery to its next delivery),
     * first_ms (ms from the subscription to the first delivery), failed_at_ms
     * (body to ms from the subscription to the failure).
     */
    String litePushRetry(Map<String, Object> r) throws Exception {
        final int n = RETRY_MESSAGES;
        CountDownLatch all = new CountDownLatch(n);
        Map<Integer, List<Integer>> attempts = new TreeMap<>();
        Map<Integer, Long> failedAt = new TreeMap<>();
        Map<Integer, Long> back = new TreeMap<>();
        long[] t0 = {0};
        long[] firstAt = {0};
        LitePushConsumer c = track(provider.newLitePushConsumerBuilder().bindTopic(LITE).setClientConfiguration(cfg)
            .setConsumerGroup(LITE_STD_G).setConsumptionThreadCount(4).setMessageListener(mv -> {
                if (!mine(mv)) {
                    return ConsumeResult.SUCCESS;
                }
                int k = number(mv);
                synchronized (attempts) {
                    long now = System.nanoTime();
                    if (firstAt[0] == 0) {
                        firstAt[0] = now;
                    }
                    List<Integer> a = attempts.computeIfAbsent(k, x -> new ArrayList<>());
                    a.add(mv.getDeliveryAttempt());
                    if (a.size() == 1) {
                        failedAt.put(k, now);
                        return ConsumeResult.FAILURE;
                    }
                    if (a.size() == 2) {
                        back.put(k, (now - failedAt.get(k)) / 1_000_000);
                        all.countDown();
                    }
                }
                return ConsumeResult.SUCCESS;
            }).build());
        try (Producer p = producer(LITE)) {
            for (int i = 0; i < n; i++) {
                p.send(message(LITE, String.valueOf(i)).setLiteTopic(run).build());
            }
        }
        int tries = 0;
        while (true) {
            tries++;
            try {
                t0[0] = System.nanoTime();
                c.subscribeLite(run, OffsetOption.MIN_OFFSET);
                break;
            } catch (ClientException e) {
                if (left() == 0 || tries >= 50) {
                    return "subscribeLite failed: " + e;
                }
                sleep(200);
            }
        }
        boolean ok = all.await(left(), TimeUnit.NANOSECONDS);
        synchronized (attempts) {
            r.put("consumed", back.size());
            r.put("attempts", new TreeMap<>(attempts));
            r.put("back_ms", new TreeMap<>(back));
            Map<Integer, Long> fa = new TreeMap<>();
            failedAt.forEach((k, v) -> fa.put(k, (v - t0[0]) / 1_000_000));
            r.put("failed_at_ms", fa);
            r.put("first_ms", firstAt[0] == 0 ? null : (firstAt[0] - t0[0]) / 1_000_000);
        }
        return ok ? null : "timeout: consumed " + back.size() + " of " + n;
    }

    /**
     * lite-push-wildcard: a LitePushConsumer in the wildcard lite group
     * WILD_G (bound to WILD), as 5.2.0 ships: no subscribeLite (a wildcard
     * group refuses it); the client's first COMPLETE_ADD sync comes 30 s after
     * start, and the broker delivers nothing to the group before it.
     * WILD_MESSAGES messages go to the lite topic named by the run right
     * after start. Facts: consumed, first_ms (ms from the consumer's start to
     * the first delivery), attempts.
     */
    String litePushWildcard(Map<String, Object> r) throws Exception {
        final int n = WILD_MESSAGES;
        CountDownLatch all = new CountDownLatch(n);
        Map<Integer, List<Integer>> attempts = new TreeMap<>();
        long[] firstAt = {0};
        long t0 = System.nanoTime();
        track(provider.newLitePushConsumerBuilder().bindTopic(WILD).setClientConfiguration(cfg)
            .setConsumerGroup(WILD_G).setConsumptionThreadCount(1).setMessageListener(mv -> {
                if (!mine(mv)) {
                    return ConsumeResult.SUCCESS;
                }
                synchronized (attempts) {
                    if (firstAt[0] == 0) {
                        firstAt[0] = System.nanoTime();
                    }
                    List<Integer> a = attempts.computeIfAbsent(number(mv), k -> new ArrayList<>());
                    a.add(mv.getDeliveryAttempt());
                    if (a.size() == 1) {
                        all.countDown();
                    }
                }
                return ConsumeResult.SUCCESS;
            }).build());
        try (Producer p = producer(WILD)) {
            for (int i = 0; i < n; i++) {
                p.send(message(WILD, String.valueOf(i)).setLiteTopic(run).build());
            }
        }
        boolean ok = all.await(left(), TimeUnit.NANOSECONDS);
        synchronized (attempts) {
            r.put("consumed", attempts.size());
            r.put("attempts", new TreeMap<>(attempts));
            r.put("first_ms", firstAt[0] == 0 ? null : (firstAt[0] - t0) / 1_000_000);
        }
        return ok ? null : "timeout: consumed " + attempts.size() + " of " + n;
    }

    // ---------------------------------------------------------------- dlq

    /**
     * dlq: two PushConsumers whose listeners fail this run's message every
     * time, in groups of one retry (max attempts 2): a normal one (the broker
     * dead-letters the message when it comes back past the limit) and a FIFO
     * one (the client forwards it: ForwardMessageToDeadLetterQueue). After
     * the last attempt, a SimpleConsumer of another group reads the group's
     * DLQ topic (%DLQ%group) until the message is there. On the FIFO topic a
     * second message of the same message group follows the failing one; it
     * is consumed only once the first one has gone to the DLQ.
     *
     * <p>Facts per part (normal, fifo): attempts (of the failing message, as
     * the listener saw them, read when its DLQ copy was found, and again as
     * "attempts_later" 3 s after that), dlq (the DLQ copy: topic, body,
     * attempt, keys_ok), and for fifo: next_after_dlq (the second message was
     * consumed after the first one's last attempt).
     */
    String dlq(Map<String, Object> r) throws Exception {
        Map<String, Object> normal = new TreeMap<>();
        Map<String, Object> fifo = new TreeMap<>();
        r.put("normal", normal);
        r.put("fifo", fifo);
        CompletableFuture<String> n = CompletableFuture.supplyAsync(() -> dlqPart(normal, DLQ, DLQ_G, DLQ_READ_G, false));
        CompletableFuture<String> f = CompletableFuture.supplyAsync(() -> dlqPart(fifo, DLQ_FIFO, DLQ_FIFO_G, DLQ_FIFO_READ_G, true));
        String en = n.get(), ef = f.get();
        if (en == null && ef == null) {
            return null;
        }
        return "normal: " + en + "; fifo: " + ef;
    }

    private String dlqPart(Map<String, Object> r, String topic, String group, String readGroup, boolean fifo) {
        final List<Integer> attempts = new ArrayList<>();
        final long[] lastFailure = {0};
        final long[] nextConsumed = {0};
        final CountDownLatch twice = new CountDownLatch(2);
        MessageListener l = mv -> {
            if (!mine(mv)) {
                return ConsumeResult.SUCCESS;
            }
            synchronized (attempts) {
                if (body(mv).equals("next")) {
                    nextConsumed[0] = System.nanoTime();
                    return ConsumeResult.SUCCESS;
                }
                attempts.add(mv.getDeliveryAttempt());
                lastFailure[0] = System.nanoTime();
            }
            twice.countDown();
            return ConsumeResult.FAILURE;
        };
        try (Producer p = producer(topic)) {
            track(provider.newPushConsumerBuilder().setClientConfiguration(cfg).setConsumerGroup(group)
                .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
                .setConsumptionThreadCount(2).setMessageListener(l).build());
            MessageBuilder b = message(topic, "x");
            if (fifo) {
                b.setMessageGroup(run);
            }
            p.send(b.build());
            if (fifo) {
                p.send(message(topic, "next").setMessageGroup(run).build());
            }
            if (!twice.await(left(), TimeUnit.NANOSECONDS)) {
                synchronized (attempts) {
                    r.put("attempts", new ArrayList<>(attempts));
                }
                return "timeout before the second attempt";
            }
            String err = readDlq(r, "%DLQ%" + group, readGroup);
            synchronized (attempts) {
                r.put("attempts", new ArrayList<>(attempts));
            }
            if (fifo) {
                // The follower is due as soon as the forward is done.
                while (left() > 0) {
                    synchronized (attempts) {
                        if (nextConsumed[0] != 0) {
                            break;
                        }
                    }
                    sleep(100);
                }
            }
            sleep(3000); // nothing may come back after the DLQ copy was found
            synchronized (attempts) {
                r.put("attempts_later", new ArrayList<>(attempts));
                if (fifo) {
                    r.put("next_after_dlq", nextConsumed[0] != 0 && nextConsumed[0] > lastFailure[0]);
                }
            }
            return err;
        } catch (Exception e) {
            e.printStackTrace();
            return "exception: " + e;
        }
    }

    /** Reads this run's message from the DLQ topic with a SimpleConsumer (started once the topic exists). */
    private String readDlq(Map<String, Object> r, String dlq, String readGroup) {
        SimpleConsumer c = null;
        Exception last = null;
        while (c == null && left() > 0) {
            try {
                c = simple(readGroup, dlq);
            } catch (Exception e) {
                last = e;
                System.err.println("java: DLQ reader for " + dlq + ": " + e);
                sleep(500);
            }
        }
        if (c == null) {
            return "no DLQ reader for " + dlq + ": " + last;
        }
        {
            SimpleConsumer rc = c;
            List<Map<String, Object>> copies = new ArrayList<>();
            receive(rc, () -> !copies.isEmpty(), mv -> {
                Map<String, Object> m = new TreeMap<>();
                m.put("topic", mv.getTopic());
                m.put("body", body(mv));
                m.put("attempt", mv.getDeliveryAttempt());
                m.put("keys_ok", mv.getKeys().contains(run));
                copies.add(m);
                rc.ack(mv);
            });
            r.put("dlq", copies.isEmpty() ? null : copies.get(0));
            return copies.isEmpty() ? "timeout: nothing of the run in " + dlq : null;
        }
    }

    // ---------------------------------------------------------------- recall

    /**
     * recall: a Producer sends two delay messages on the delay topic,
     * "recalled" due DELAY_BY later and "marker" 2 s after that, and recalls
     * the first (recallMessage with its send receipt's recall handle) at
     * once; a SimpleConsumer (group RECALL_G) receives until the marker is
     * in, by which time the recalled one would have come (one of the
     * broker's 1 s timer slots and more before it). RocketMQ 5.5.0
     * recalls only with the broker's recallMessageEnable=true (its default
     * is false: "recall failed, operation is forbidden"); scripts/rocketmq.sh
     * sets it.
     *
     * <p>Facts: recall_handle (the receipt had one), recall_error (null when
     * the recall was accepted), received (bodies).
     */
    String recall(Map<String, Object> r) throws Exception {
        List<String> received = Collections.synchronizedList(new ArrayList<>());
        SimpleConsumer c = simple(RECALL_G, DELAY);
        try (Producer p = producer(DELAY)) {
            long at = System.currentTimeMillis() + DELAY_BY.toMillis();
            String handle = p.send(message(DELAY, "recalled").setDeliveryTimestamp(at).build()).getRecallHandle();
            p.send(message(DELAY, "marker").setDeliveryTimestamp(at + 2000).build());
            r.put("recall_handle", handle != null && !handle.isEmpty());
            try {
                p.recallMessage(DELAY, handle);
                r.put("recall_error", null);
            } catch (ClientException e) {
                r.put("recall_error", e.toString());
            }
            receive(c, () -> received.contains("marker"), mv -> {
                received.add(body(mv));
                c.ack(mv);
            });
        }
        r.put("received", new ArrayList<>(received));
        return received.contains("marker") ? null : "timeout: the marker was not delivered";
    }

    // ---------------------------------------------------------------- transaction

    /**
     * transaction: a Producer with a TransactionChecker sends three
     * transactional messages: "commit" (committed), "rollback" (rolled back)
     * and "open" (left open: the broker checks it over the producer's
     * Telemetry stream, on 5.5.0 6 to 36 s after the send, and the checker
     * commits it). A SimpleConsumer receives until "commit" and "open" are
     * in. The checker answers UNKNOWN for other runs' messages (another
     * run's open transaction is not ours to end).
     *
     * <p>Facts: received (bodies in receive order, each with its attempt as
     * "body:attempt"), checked (the bodies the checker was asked about),
     * rollback_delivered.
     */
    String transaction(Map<String, Object> r) throws Exception {
        List<String> checked = Collections.synchronizedList(new ArrayList<>());
        List<String> received = Collections.synchronizedList(new ArrayList<>());
        SimpleConsumer c = simple(TXN_G, TXN);
        try (Producer p = provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(TXN)
            .setTransactionChecker(mv -> {
                if (!mine(mv)) {
                    return TransactionResolution.UNKNOWN;
                }
                checked.add(body(mv));
                return TransactionResolution.COMMIT;
            }).build()) {
            for (String b : new String[] {"commit", "rollback", "open"}) {
                Transaction tx = p.beginTransaction();
                p.send(message(TXN, b).build(), tx);
                if (b.equals("commit")) {
                    tx.commit();
                } else if (b.equals("rollback")) {
                    tx.rollback();
                }
            }
            receive(c, () -> received.stream().filter(x -> !x.startsWith("rollback")).count() >= 2, mv -> {
                received.add(body(mv) + ":" + mv.getDeliveryAttempt());
                c.ack(mv);
            });
        }
        r.put("received", new ArrayList<>(received));
        r.put("checked", new ArrayList<>(checked));
        r.put("rollback_delivered", received.stream().anyMatch(x -> x.startsWith("rollback")));
        if (received.stream().filter(x -> !x.startsWith("rollback")).count() >= 2) {
            return null;
        }
        return "timeout: received " + received;
    }
}
