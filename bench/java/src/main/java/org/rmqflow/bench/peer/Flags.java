package org.rmqflow.bench.peer;

import java.time.Duration;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The flags every benchmark peer takes, as --name=value (or --name value). */
final class Flags {
    String endpoint = envOr("RMQFLOW_ENDPOINT", "127.0.0.1:18081");
    String topic = "";
    String group = "";
    String mode = "normal";
    /** Empty until parsed: then the variant asked for, or the mode's strongest. */
    String variant = "";
    String run = "";
    int messages;
    int warmup;
    Duration window = Duration.ZERO;
    int concurrency = 4;
    int batch = 32;
    Duration invisible = Duration.ofSeconds(60);
    Duration await = Duration.ofSeconds(5);
    Duration handlerDelay = Duration.ZERO;
    /** The harness says how many lite topics the backlog spreads over; informational. */
    int liteTopics;
    Duration timeout = Duration.ofMinutes(5);
    String timeoutText = "5m";

    boolean lite() {
        return "lite".equals(mode);
    }

    /** A normal message is of the run when one of its keys is the run id. */
    boolean mineByKeys(Iterable<String> keys) {
        for (String k : keys) {
            if (run.equals(k)) {
                return true;
            }
        }
        return false;
    }

    /** A lite message is of the run when its lite topic starts with "run-". */
    boolean mineByLiteTopic(String liteTopic) {
        return liteTopic != null && liteTopic.startsWith(run + "-");
    }

    static Flags parse(String[] args) {
        Flags f = new Flags();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("-")) {
                throw new IllegalArgumentException("unexpected argument " + a);
            }
            String name = a.replaceFirst("^--?", "");
            String value;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            } else if (i + 1 < args.length) {
                value = args[++i];
            } else {
                throw new IllegalArgumentException("flag --" + name + " needs a value");
            }
            switch (name) {
                case "endpoint": f.endpoint = value; break;
                case "topic": f.topic = value; break;
                case "group": f.group = value; break;
                case "mode": f.mode = value; break;
                case "variant": f.variant = value; break;
                case "run": f.run = value; break;
                case "messages": f.messages = parseInt(name, value); break;
                case "warmup": f.warmup = parseInt(name, value); break;
                case "window": f.window = parseDuration(name, value); break;
                case "concurrency": f.concurrency = parseInt(name, value); break;
                case "batch": f.batch = parseInt(name, value); break;
                case "invisible": f.invisible = parseDuration(name, value); break;
                case "await": f.await = parseDuration(name, value); break;
                case "handler-delay": f.handlerDelay = parseDuration(name, value); break;
                case "lite-topics": f.liteTopics = parseInt(name, value); break;
                case "timeout": f.timeout = parseDuration(name, value); f.timeoutText = value; break;
                default: throw new IllegalArgumentException("unknown flag --" + name);
            }
        }
        if (f.topic.isEmpty() || f.group.isEmpty() || f.run.isEmpty()) {
            throw new IllegalArgumentException("--topic, --group and --run are required");
        }
        if (!f.mode.equals("normal") && !f.mode.equals("lite")) {
            throw new IllegalArgumentException("--mode " + f.mode + ": want normal or lite");
        }
        if (f.variant.isEmpty()) {
            f.variant = f.lite() ? "lite-push" : "simple";
        }
        switch (f.variant) {
            case "simple":
            case "push":
                if (f.lite()) {
                    throw new IllegalArgumentException("--variant " + f.variant + " consumes a normal topic: want --mode normal");
                }
                break;
            case "lite-push":
                if (!f.lite()) {
                    throw new IllegalArgumentException("--variant lite-push consumes a LITE topic: want --mode lite");
                }
                break;
            default:
                throw new IllegalArgumentException("--variant " + f.variant + ": want simple, push or lite-push");
        }
        if (f.messages < 1) {
            throw new IllegalArgumentException("--messages must be at least 1");
        }
        if (f.warmup < 0 || f.warmup >= f.messages) {
            throw new IllegalArgumentException("--warmup must be at least 0 and below --messages");
        }
        if (f.window.isNegative() || f.handlerDelay.isNegative()) {
            throw new IllegalArgumentException("--window and --handler-delay must not be negative");
        }
        if (f.batch < 1 || f.invisible.isZero() || f.invisible.isNegative() || f.await.isNegative()) {
            throw new IllegalArgumentException("--batch, --invisible must be positive, --await not negative");
        }
        if (f.concurrency < 1) {
            throw new IllegalArgumentException("--concurrency must be at least 1");
        }
        if (f.timeout.isZero() || f.timeout.isNegative()) {
            throw new IllegalArgumentException("--timeout must be positive");
        }
        return f;
    }

    private static int parseInt(String name, String value) {
        try {
            return Integer.parseInt(value);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + name + " " + value + ": not an integer");
        }
    }

    private static final Pattern DURATION_PART = Pattern.compile("(\\d+(?:\\.\\d+)?)(ns|us|µs|ms|s|m|h)");

    /** Reads a Go-style duration ("90s", "2m", "1m30s", "500ms", "0s") or plain seconds ("120"). */
    static Duration parseDuration(String name, String s) {
        if (s.matches("\\d+(\\.\\d+)?")) {
            return Duration.ofNanos((long) (Double.parseDouble(s) * 1e9));
        }
        Matcher m = DURATION_PART.matcher(s);
        long nanos = 0;
        int end = 0;
        while (m.find() && m.start() == end) {
            double v = Double.parseDouble(m.group(1));
            double unit;
            switch (m.group(2)) {
                case "ns": unit = 1; break;
                case "us": case "µs": unit = 1e3; break;
                case "ms": unit = 1e6; break;
                case "s": unit = 1e9; break;
                case "m": unit = 60e9; break;
                default: unit = 3600e9; break;
            }
            nanos += (long) (v * unit);
            end = m.end();
        }
        if (end == 0 || end != s.length()) {
            throw new IllegalArgumentException("--" + name + " " + s + ": not a duration (e.g. 90s, 2m, 1m30s)");
        }
        return Duration.ofNanos(nanos);
    }

    private static String envOr(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? def : v;
    }
}
