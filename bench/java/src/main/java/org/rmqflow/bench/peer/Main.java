package org.rmqflow.bench.peer;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;

/**
 * rmqflow benchmark peer on the official RocketMQ Java client. It consumes a
 * pre-produced backlog, acks it, and prints exactly one JSON line on stdout
 * (everything else goes to stderr or to the client's log files). See
 * bench/README.md for the flags, the JSON fields and the exit codes.
 */
public final class Main {
    static final String PEER = "java";
    static final int EXIT_OK = 0;
    static final int EXIT_FAILED = 1;
    static final int EXIT_USAGE = 2;

    private Main() {
    }

    public static void main(String[] args) {
        // Stdout carries the JSON line only: whatever else prints goes to stderr.
        PrintStream out = System.out;
        System.setOut(System.err);
        Path logs = setUpClientLogs();
        int code = run(args, out);
        deleteLogs(logs);
        out.flush();
        System.exit(code);
    }

    private static int run(String[] args, PrintStream out) {
        Flags f;
        try {
            f = Flags.parse(args);
        } catch (IllegalArgumentException e) {
            String mode = argValue(args, "mode", "normal");
            String variant = argValue(args, "variant", "");
            out.println(Tracker.none().json(PEER, variant, mode, 0, e.getMessage()));
            return EXIT_USAGE;
        }
        long deadline = System.nanoTime() + f.timeout.toNanos();
        Tracker t = new Tracker(f.messages, f.warmup, f.window, f.lite());
        Peer peer;
        switch (f.variant) {
            case "push": peer = new PushPeer(f, t); break;
            case "lite-push": peer = new LitePeer(f, t); break;
            default: peer = new SimplePeer(f, t); break;
        }
        System.err.printf("java: variant %s, mode %s, topic %s, group %s, run %s, messages %d, warmup %d, "
                + "window %s, concurrency %d, handler delay %s%n", f.variant, f.mode, f.topic, f.group, f.run,
            f.messages, f.warmup, f.window, f.concurrency, f.handlerDelay);
        Thread slices = slicePrinter(t);
        String error = null;
        int code = EXIT_OK;
        try {
            CompletableFuture<Void> started = CompletableFuture.runAsync(() -> {
                try {
                    peer.start();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            started.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (!t.await(deadline - System.nanoTime())) {
                error = String.format("timeout after %s: %d of %d messages of run %s acked",
                    f.timeoutText, t.ackedCount(), f.messages, f.run);
                code = EXIT_FAILED;
            }
        } catch (TimeoutException e) {
            error = "timeout after " + f.timeoutText + " while starting the consumer";
            code = EXIT_FAILED;
        } catch (Exception e) {
            Throwable c = e;
            while (c.getCause() != null && (c instanceof RuntimeException || c instanceof java.util.concurrent.ExecutionException)) {
                c = c.getCause();
            }
            error = "consumer failed: " + c;
            code = EXIT_FAILED;
        }
        slices.interrupt();
        System.err.printf("java: %d distinct messages of the run acked, %d failed receive RPCs in the whole run%n",
            t.ackedCount(), t.receiveFailures());
        long foreign = t.foreign();
        if (foreign > 0) {
            error = error == null ? foreign + " foreign messages" : error + "; " + foreign + " foreign messages";
            code = EXIT_FAILED;
        }
        out.println(t.json(PEER, f.variant, f.mode, f.concurrency, error));
        out.flush();
        closeWithin(peer, 5);
        return code;
    }

    /** The value of --name=value or --name value in args, else def. */
    private static String argValue(String[] args, String name, String def) {
        for (int i = 0; i < args.length; i++) {
            String a = args[i].replaceFirst("^--?", "");
            if (a.startsWith(name + "=")) {
                return a.substring(name.length() + 1);
            }
            if (a.equals(name) && i + 1 < args.length) {
                return args[i + 1];
            }
        }
        return def;
    }

    /**
     * Every 5 s, the distinct messages acked so far, the rate and the process
     * CPU per message of the last slice, on stderr: shows when the JVM has
     * warmed up.
     */
    private static Thread slicePrinter(Tracker t) {
        Thread th = new Thread(() -> {
            long start = System.nanoTime();
            long last = start;
            long lastCpu = Tracker.cpuNanos();
            int lastN = 0;
            try {
                while (true) {
                    Thread.sleep(5000);
                    long now = System.nanoTime();
                    long cpu = Tracker.cpuNanos();
                    int n = t.ackedCount();
                    System.err.printf("peer: slice t=%.1fs acked=%d rate=%.0f/s cpu=%.0fus/msg%n", (now - start) / 1e9,
                        n, (n - lastN) / ((now - last) / 1e9), (cpu - lastCpu) / 1e3 / Math.max(1, n - lastN));
                    last = now;
                    lastCpu = cpu;
                    lastN = n;
                }
            } catch (InterruptedException e) {
                // done
            }
        }, "peer-slices");
        th.setDaemon(true);
        th.start();
        return th;
    }

    private static void closeWithin(Peer peer, int seconds) {
        Thread closer = new Thread(() -> {
            try {
                peer.close();
            } catch (Exception e) {
                System.err.println("java: close: " + e);
            }
        }, "peer-close");
        closer.setDaemon(true);
        closer.start();
        try {
            closer.join(TimeUnit.SECONDS.toMillis(seconds));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (closer.isAlive()) {
            System.err.println("java: consumer did not close within " + seconds + "s");
        }
    }

    /**
     * The client logs to files under rocketmq.log.root; they go to a temporary
     * directory (removed at exit) unless RMQFLOW_PEER_LOGS names one to keep.
     * Must run before any client class is loaded.
     */
    private static Path setUpClientLogs() {
        System.setProperty("mq.consoleAppender.enabled", "false");
        String keep = System.getenv("RMQFLOW_PEER_LOGS");
        if (keep != null && !keep.isEmpty()) {
            System.setProperty("rocketmq.log.root", keep);
            return null;
        }
        try {
            Path dir = Files.createTempDirectory("rmqflow-bench-java-logs-");
            System.setProperty("rocketmq.log.root", dir.toString());
            return dir;
        } catch (IOException e) {
            System.err.println("java: no temporary log directory: " + e);
            return null;
        }
    }

    private static void deleteLogs(Path dir) {
        if (dir == null) {
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // best effort
        }
    }
}
