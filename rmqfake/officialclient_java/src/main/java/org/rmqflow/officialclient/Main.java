package org.rmqflow.officialclient;

import java.io.PrintStream;
import java.nio.file.Files;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Drives the official RocketMQ Java client 5.2.0 through one flow against one
 * endpoint and prints, as one JSON line on stdout, what the client saw; the
 * Go test rmqfake/officialclient_test/java_test.go runs every flow against
 * rmqfake and the real broker and asserts that JSON. Everything else goes to
 * stderr or to the client's log files (under --logs DIR, else a temporary
 * directory).
 *
 * <pre>
 * java -jar rmqflow-official-java.jar --endpoint HOST:PORT --flow NAME --run RUNID [--timeout 60s] [--logs DIR]
 * </pre>
 *
 * Flows (see {@link Flows}): producer-simple, push, lite-push, dlq, transaction, recall, lite-push-wildcard, lite-push-retry (and
 * lite-push-standard, which the test does not run). The run id
 * goes into every message's keys (and is the lite topic of lite-push), so
 * messages of other runs on the same topics are consumed and ignored.
 *
 * <p>The JSON always has flow, run, elapsed_ms and error (null when the flow
 * completed before its timeout), and the flow's own facts. Exit code 0 when
 * error is null, 1 otherwise, 2 for bad flags.
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        System.setOut(System.err);
        Map<String, String> flags;
        try {
            flags = parse(args);
        } catch (IllegalArgumentException e) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("error", "usage: " + e.getMessage());
            out.println(Json.of(r));
            out.flush();
            System.exit(2);
            return;
        }
        // The client reads these when its logger loads, so before any client class.
        System.setProperty("mq.consoleAppender.enabled", "false");
        String logs = flags.get("logs");
        if (logs == null) {
            logs = Files.createTempDirectory("rmqflow-official-java-").toString();
        }
        System.setProperty("rocketmq.log.root", logs);

        Duration timeout = Duration.parse("PT" + flags.getOrDefault("timeout", "60s").toUpperCase());
        Flows f = new Flows(flags.get("endpoint"), flags.get("run"), timeout);
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("flow", flags.get("flow"));
        r.put("run", flags.get("run"));
        long t0 = System.nanoTime();
        String error;
        try {
            switch (flags.get("flow")) {
                case "producer-simple": error = f.producerSimple(r); break;
                case "push": error = f.push(r); break;
                case "lite-push": error = f.litePush(r, Flows.LITE_FIFO_G); break;
                case "lite-push-standard": error = f.litePush(r, Flows.LITE_G); break;
                case "dlq": error = f.dlq(r); break;
                case "transaction": error = f.transaction(r); break;
                case "recall": error = f.recall(r); break;
                case "lite-push-wildcard": error = f.litePushWildcard(r); break;
                case "lite-push-retry": error = f.litePushRetry(r); break;
                default:
                    r.put("error", "unknown flow " + flags.get("flow") + " (producer-simple, push, lite-push, dlq, transaction, recall, lite-push-wildcard, lite-push-retry, lite-push-standard)");
                    out.println(Json.of(r));
                    out.flush();
                    System.exit(2);
                    return;
            }
        } catch (Throwable e) {
            e.printStackTrace();
            error = "exception: " + e;
        }
        r.put("elapsed_ms", (System.nanoTime() - t0) / 1_000_000);
        r.put("error", error);
        out.println(Json.of(r));
        out.flush();
        f.closeAll(Duration.ofSeconds(3));
        // The client's executors are not all daemons; exit for them.
        System.exit(error == null ? 0 : 1);
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + a);
            }
            String k = a.substring(2);
            String v;
            int eq = k.indexOf('=');
            if (eq >= 0) {
                v = k.substring(eq + 1);
                k = k.substring(0, eq);
            } else if (i + 1 < args.length) {
                v = args[++i];
            } else {
                throw new IllegalArgumentException("flag --" + k + " needs a value");
            }
            switch (k) {
                case "endpoint": case "flow": case "run": case "timeout": case "logs":
                    m.put(k, v);
                    break;
                default:
                    throw new IllegalArgumentException("unknown flag --" + k);
            }
        }
        for (String k : new String[] {"endpoint", "flow", "run"}) {
            if (!m.containsKey(k)) {
                throw new IllegalArgumentException("--" + k + " is required");
            }
        }
        return m;
    }
}
