package org.rmqflow.bench.peer;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The books of one run: distinct messages of the run acked, ack RPCs,
 * receive-to-ack latencies, and the measured span (first message received to
 * the ack that completed the run) in wall and CPU time. Thread-safe.
 */
final class Tracker {
    private final int goal;
    private final long startedNanos = System.nanoTime();
    private final AtomicLong ackRpcs = new AtomicLong();
    private final AtomicLong other = new AtomicLong();
    private final CountDownLatch done = new CountDownLatch(1);

    private final Object lock = new Object();
    private long firstNanos;
    private long firstCpu;
    private long endNanos;
    private long endCpu;
    private final Set<String> acked = new HashSet<>();
    private final List<Long> latencies = new ArrayList<>();

    Tracker(int goal) {
        this.goal = goal;
    }

    /** A receive returned n messages; returns the receive time for {@link #acked}. */
    long received(int n) {
        long now = System.nanoTime();
        if (n > 0) {
            synchronized (lock) {
                if (firstNanos == 0) {
                    firstNanos = now;
                    firstCpu = cpuNanos();
                }
            }
        }
        return now;
    }

    void ackRpc() {
        ackRpcs.incrementAndGet();
    }

    /** An ack of message id (received at receivedNanos) succeeded. */
    void acked(String id, boolean mine, long receivedNanos) {
        long now = System.nanoTime();
        if (!mine) {
            other.incrementAndGet();
            return;
        }
        synchronized (lock) {
            if (endNanos != 0 || !acked.add(id)) {
                return;
            }
            if (receivedNanos > 0) {
                latencies.add(now - receivedNanos);
            }
            if (acked.size() == goal) {
                endNanos = now;
                endCpu = cpuNanos();
                done.countDown();
            }
        }
    }

    boolean await(long nanos) throws InterruptedException {
        return done.await(nanos, TimeUnit.NANOSECONDS);
    }

    int ackedCount() {
        synchronized (lock) {
            return acked.size();
        }
    }

    /** The JSON line for the run so far; error may be null. */
    String json(String peer, String mode, String error) {
        StringBuilder b = new StringBuilder(256);
        synchronized (lock) {
            double seconds = 0, cpu = 0, startup = 0, p50 = 0, p99 = 0;
            if (firstNanos != 0) {
                long end = endNanos, ecpu = endCpu;
                if (end == 0) {
                    end = System.nanoTime();
                    ecpu = cpuNanos();
                }
                seconds = (end - firstNanos) / 1e9;
                cpu = (ecpu - firstCpu) / 1e9;
                startup = (firstNanos - startedNanos) / 1e9;
            }
            if (!latencies.isEmpty()) {
                List<Long> l = new ArrayList<>(latencies);
                Collections.sort(l);
                p50 = percentile(l, 50) / 1e6;
                p99 = percentile(l, 99) / 1e6;
            }
            b.append("{\"peer\":").append(quote(peer))
                .append(",\"mode\":").append(quote(mode))
                .append(",\"messages\":").append(acked.size())
                .append(",\"seconds\":").append(seconds)
                .append(",\"cpu_seconds\":").append(cpu)
                .append(",\"ack_rpcs\":").append(ackRpcs.get())
                .append(",\"rss_bytes\":").append(peakRss())
                .append(",\"p50_ms\":").append(p50)
                .append(",\"p99_ms\":").append(p99)
                .append(",\"startup_seconds\":").append(startup)
                .append(",\"acked_other\":").append(other.get());
        }
        if (error != null) {
            b.append(",\"error\":").append(quote(error));
        }
        return b.append('}').toString();
    }

    /** The nearest-rank percentile of sorted values. */
    private static long percentile(List<Long> sorted, int p) {
        int i = (sorted.size() * p + 99) / 100;
        return sorted.get(Math.max(i, 1) - 1);
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
