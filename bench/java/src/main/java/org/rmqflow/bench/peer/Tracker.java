package org.rmqflow.bench.peer;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The books of one run (contract v2, bench/README.md): distinct messages of
 * the run acked, the timed window and what happened inside it. Thread-safe.
 *
 * <p>The window opens when the W-th distinct message of the run is acked
 * (--warmup W), or at the first message received when W is 0, and closes at
 * the N-th distinct ack (--messages N) or when --window has passed since it
 * opened. Messages, CPU, RPC counts and latencies cover the window only;
 * redelivered, ack failures and foreign cover the whole run. A message of
 * the run received again after its first receipt ({@link #seen}) counts in
 * redelivered, whatever became of its first ack.
 */
final class Tracker {
    /** What the harness waits for on stderr: the first message has arrived. */
    static final String READY_LINE = "peer: first message";

    private final int goal;
    private final int warmup;
    private final Duration window;
    private final boolean lite;
    private final long startedNanos = System.nanoTime();
    /** Unix time in ns = unixBase + System.nanoTime(). */
    private final long unixBase;

    // Window counters: only counted while the window is open.
    private volatile boolean open;
    private final AtomicLong receiveRpcs = new AtomicLong();
    private final AtomicLong emptyReceives = new AtomicLong();
    private final AtomicLong ackRpcs = new AtomicLong();
    private final AtomicLong changeRpcs = new AtomicLong();
    private final AtomicLong ackFailures = new AtomicLong();
    private final Set<String> foreign = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private final AtomicLong receiveFailures = new AtomicLong();

    private final CountDownLatch done = new CountDownLatch(1);
    private final ScheduledExecutorService timer;

    private final Object lock = new Object();
    private volatile long firstNanos;
    private long windowStart;
    private long windowEnd;
    private long startCpu;
    private long endCpu;
    private boolean expired;
    private int windowMessages;
    private long redelivered;
    private final Set<String> acked = new HashSet<>();
    /** Ids of the run received ({@link #seen}), whole run. */
    private final Set<String> seen = new HashSet<>();
    private final Longs latencies = new Longs();
    private final Longs e2e = new Longs();
    private final Longs coldE2e = new Longs();
    private final Longs hotE2e = new Longs();

    Tracker(int goal, int warmup, Duration window, boolean lite) {
        this.goal = goal;
        this.warmup = warmup;
        this.window = window;
        this.lite = lite;
        Instant now = Instant.now();
        this.unixBase = now.getEpochSecond() * 1_000_000_000L + now.getNano() - System.nanoTime();
        if (window.isZero()) {
            timer = null;
        } else {
            timer = Executors.newSingleThreadScheduledExecutor(r -> {
                Thread t = new Thread(r, "peer-window");
                t.setDaemon(true);
                return t;
            });
        }
    }

    /** For a usage error: no run at all. */
    static Tracker none() {
        return new Tracker(1, 0, Duration.ZERO, false);
    }

    long unixNanos(long nanoTime) {
        return unixBase + nanoTime;
    }

    /**
     * A receive RPC returned n messages (n = 0: an empty receive); returns
     * its time for {@link #acked}.
     */
    long received(int n) {
        long now = System.nanoTime();
        if (n > 0 && firstNanos == 0) {
            first(now);
        }
        if (open) {
            receiveRpcs.incrementAndGet();
            if (n == 0) {
                emptyReceives.incrementAndGet();
            }
        }
        return now;
    }

    /** A receive RPC failed. */
    void receiveFailed() {
        receiveFailures.incrementAndGet();
        if (open) {
            receiveRpcs.incrementAndGet();
        }
    }

    private void first(long now) {
        synchronized (lock) {
            if (firstNanos != 0) {
                return;
            }
            firstNanos = now;
            System.err.println(READY_LINE + " after " + (now - startedNanos) / 1_000_000 + " ms");
            if (warmup == 0) {
                openWindow(now);
            }
        }
    }

    /**
     * A message was received (every delivery, before its ack): one of the run
     * received before counts in redelivered, whatever became of its first
     * ack. Foreign messages are not counted here.
     */
    void seen(String id, boolean mine) {
        if (!mine) {
            return;
        }
        synchronized (lock) {
            if (!seen.add(id)) {
                redelivered++;
            }
        }
    }

    /** n acks (messages) failed or were refused by the broker; whole run. */
    void ackFailed(long n) {
        ackFailures.addAndGet(n);
    }

    /** A ChangeInvisibleDuration RPC returned (counted in the window). */
    void changeRpc() {
        if (open) {
            changeRpcs.incrementAndGet();
        }
    }

    /** An AckMessage RPC returned (whatever its outcome). */
    void ackRpc() {
        if (open) {
            ackRpcs.incrementAndGet();
        }
    }

    /**
     * A message was acked (its ack returned OK): id, of the run or not, the
     * receive time from {@link #received}, its born timestamp (unix ms, 0 if
     * unknown) and its lite topic (null for normal messages).
     */
    void acked(String id, boolean mine, long receivedNanos, long bornMillis, String liteTopic) {
        long now = System.nanoTime();
        if (!mine) {
            foreign.add(id);
            return;
        }
        synchronized (lock) {
            if (!acked.add(id)) {
                if (!seen.contains(id)) { // a receipt not reported through seen
                    redelivered++;
                }
                return;
            }
            if (firstNanos == 0) {
                first(receivedNanos > 0 ? receivedNanos : now);
            }
            if (windowStart != 0 && windowEnd == 0) {
                windowMessages++;
                if (receivedNanos > 0) {
                    latencies.add(now - receivedNanos);
                }
                if (bornMillis > 0) {
                    long d = unixNanos(now) - bornMillis * 1_000_000L;
                    e2e.add(d);
                    if (liteTopic != null) {
                        (liteTopic.endsWith("-hot") ? hotE2e : coldE2e).add(d);
                    }
                }
            }
            int n = acked.size();
            if (n == warmup && warmup > 0) {
                openWindow(now);
            }
            if (n == goal) {
                closeWindow(now, false);
            }
        }
    }

    /** Messages seen again (received or acked) after their first ack, outside the ack path. */
    boolean isAcked(String id) {
        synchronized (lock) {
            return acked.contains(id);
        }
    }

    private void openWindow(long now) {
        windowStart = now;
        startCpu = cpuNanos();
        open = true;
        if (timer != null) {
            timer.schedule(() -> {
                synchronized (lock) {
                    closeWindow(System.nanoTime(), true);
                }
            }, window.toNanos(), TimeUnit.NANOSECONDS);
        }
    }

    private void closeWindow(long now, boolean byTimer) {
        if (windowEnd != 0) {
            return;
        }
        open = false;
        windowEnd = now;
        endCpu = cpuNanos();
        expired = byTimer;
        done.countDown();
    }

    boolean await(long nanos) throws InterruptedException {
        return done.await(nanos, TimeUnit.NANOSECONDS);
    }

    int ackedCount() {
        synchronized (lock) {
            return acked.size();
        }
    }

    /** Distinct messages acked that were not of the run. */
    long foreign() {
        return foreign.size();
    }

    /** Failed receive RPCs over the whole run (stderr only). */
    long receiveFailures() {
        return receiveFailures.get();
    }

    /** The JSON line for the run so far; error may be null. */
    String json(String peer, String variant, String mode, int concurrency, String error) {
        StringBuilder b = new StringBuilder(512);
        synchronized (lock) {
            double seconds = 0, cpu = 0, startup = 0;
            long startUnix = 0, endUnix = 0;
            if (windowStart != 0) {
                long end = windowEnd, ecpu = endCpu;
                if (end == 0) {
                    end = System.nanoTime();
                    ecpu = cpuNanos();
                }
                seconds = (end - windowStart) / 1e9;
                cpu = (ecpu - startCpu) / 1e9;
                startUnix = unixNanos(windowStart);
                endUnix = unixNanos(end);
            }
            if (firstNanos != 0) {
                startup = (firstNanos - startedNanos) / 1e9;
            }
            b.append("{\"peer\":").append(quote(peer))
                .append(",\"variant\":").append(quote(variant))
                .append(",\"mode\":").append(quote(mode))
                .append(",\"concurrency\":").append(concurrency)
                .append(",\"messages\":").append(windowMessages)
                .append(",\"warmup\":").append(warmup)
                .append(",\"seconds\":").append(seconds)
                .append(",\"window_start_unix_ns\":").append(startUnix)
                .append(",\"window_end_unix_ns\":").append(endUnix)
                .append(",\"cpu_seconds\":").append(cpu)
                .append(",\"rss_bytes\":").append(peakRss())
                .append(",\"receive_rpcs\":").append(receiveRpcs.get())
                .append(",\"empty_receives\":").append(emptyReceives.get())
                .append(",\"ack_rpcs\":").append(ackRpcs.get())
                .append(",\"p50_ms\":").append(latencies.percentileMs(50))
                .append(",\"p99_ms\":").append(latencies.percentileMs(99))
                .append(",\"e2e_p50_ms\":").append(e2e.percentileMs(50))
                .append(",\"e2e_p99_ms\":").append(e2e.percentileMs(99))
                .append(",\"cold_e2e_p99_ms\":").append(lite ? coldE2e.percentileMs(99) : 0.0)
                .append(",\"hot_e2e_p99_ms\":").append(lite ? hotE2e.percentileMs(99) : 0.0)
                .append(",\"startup_seconds\":").append(startup)
                .append(",\"redelivered\":").append(redelivered)
                .append(",\"ack_failures\":").append(ackFailures.get())
                .append(",\"change_rpcs\":").append(changeRpcs.get())
                .append(",\"foreign\":").append(foreign.size())
                .append(",\"window_expired\":").append(expired);
        }
        if (error != null) {
            b.append(",\"error\":").append(quote(error));
        }
        return b.append('}').toString();
    }

    /** A growable array of nanosecond durations. */
    private static final class Longs {
        private long[] v = new long[1024];
        private int n;

        void add(long x) {
            if (n == v.length) {
                v = Arrays.copyOf(v, n * 2);
            }
            v[n++] = x;
        }

        /** The nearest-rank percentile in milliseconds; 0 when empty. */
        double percentileMs(int p) {
            if (n == 0) {
                return 0;
            }
            long[] s = Arrays.copyOf(v, n);
            Arrays.sort(s);
            // ceil(n*p/100) in integers, 1-based: the same formula as Go's peerkit
            int rank = (int) (((long) n * p + 99) / 100);
            return s[Math.max(rank, 1) - 1] / 1e6;
        }
    }

    /** The process's CPU time (all threads, user + system) in nanoseconds. */
    static long cpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return 0;
    }

    /** The process's peak resident set size (VmHWM) in bytes, 0 when unknown. */
    static long peakRss() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    String[] f = line.trim().split("\\s+");
                    return Long.parseLong(f[1]) * 1024;
                }
            }
        } catch (Exception e) {
            // not Linux: unknown
        }
        return 0;
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }
}
