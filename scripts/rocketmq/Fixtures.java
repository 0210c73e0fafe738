// Creates the topics and consumer groups listed in fixtures.txt, and the
// users and ACLs of users.txt, on a running RocketMQ cluster. Run as a
// single-file program (java Fixtures.java) with the RocketMQ tools jars on
// the class path; scripts/rocketmq.sh does that.
//
// The files, one entry per line ('#' starts a comment):
//   topic <name> normal|lite|fifo|delay|transaction [queues=N] [ttl=MINUTES]
//   group <name> [retry=N] [bind=<lite main topic>] [wildcard] [exclusive] [fifo] [event-cap=N]
//   user <name> <password> [super] [disabled]
//   acl <user> <resource>[,<resource>...] <action>[,<action>...] allow|deny [ip=<ip or CIDR>[,...]]
// A user is created or, when it exists, updated; a user's ACL is replaced by
// the acl lines that name it (users and ACLs live in the broker's store and
// need its metadata providers, see scripts/rocketmq.sh).
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class Fixtures {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Fixtures <namesrv> <cluster> <fixtures.txt>...");
            System.exit(2);
        }
        DefaultMQAdminExt admin = new DefaultMQAdminExt(10_000);
        admin.setNamesrvAddr(args[0]);
        admin.setInstanceName("rmqflow-fixtures-" + ProcessHandle.current().pid());
        admin.start();
        try {
            ClusterInfo info = admin.examineBrokerClusterInfo();
            Set<String> brokerNames = info.getClusterAddrTable().get(args[1]);
            if (brokerNames == null || brokerNames.isEmpty()) {
                throw new IllegalStateException("cluster " + args[1] + " has no broker");
            }
            List<String> lines = new ArrayList<>();
            for (int i = 2; i < args.length; i++) {
                lines.addAll(Files.readAllLines(Path.of(args[i])));
            }
            for (String brokerName : brokerNames) {
                BrokerData bd = info.getBrokerAddrTable().get(brokerName);
                String addr = bd.getBrokerAddrs().get(0L);
                Set<String> aclCleared = new HashSet<>();
                for (String raw : lines) {
                    String line = raw.replaceAll("#.*", "").trim();
                    if (line.isEmpty()) {
                        continue;
                    }
                    apply(admin, addr, line.split("\\s+"), aclCleared);
                }
            }
        } finally {
            admin.shutdown();
        }
    }

    static boolean userExists(DefaultMQAdminExt admin, String addr, String name) {
        try {
            return admin.getUser(addr, name) != null;
        } catch (Exception e) {
            return false;
        }
    }

    static void apply(DefaultMQAdminExt admin, String addr, String[] f, Set<String> aclCleared) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 2; i < f.length; i++) {
            String[] kv = f[i].split("=", 2);
            opts.put(kv[0], kv.length == 2 ? kv[1] : "true");
        }
        switch (f[0]) {
            case "topic": {
                int queues = Integer.parseInt(opts.getOrDefault("queues", "4"));
                TopicConfig tc = new TopicConfig(f[1], queues, queues);
                Map<String, String> attrs = new HashMap<>();
                String type = f.length > 2 ? f[2] : "normal";
                switch (type) {
                    case "normal": attrs.put("+message.type", "NORMAL"); break;
                    case "lite": attrs.put("+message.type", "LITE"); break;
                    case "fifo": attrs.put("+message.type", "FIFO"); break;
                    case "delay": attrs.put("+message.type", "DELAY"); break;
                    case "transaction": attrs.put("+message.type", "TRANSACTION"); break;
                    default: throw new IllegalArgumentException("unknown topic type " + type);
                }
                if (opts.containsKey("ttl")) {
                    attrs.put("+lite.topic.expiration", opts.get("ttl"));
                }
                tc.setAttributes(attrs);
                admin.createAndUpdateTopicConfig(addr, tc);
                System.out.println("topic " + f[1] + " " + type);
                break;
            }
            case "group": {
                SubscriptionGroupConfig gc = new SubscriptionGroupConfig();
                gc.setGroupName(f[1]);
                gc.setRetryMaxTimes(Integer.parseInt(opts.getOrDefault("retry", "16")));
                gc.setConsumeMessageOrderly(opts.containsKey("fifo"));
                Map<String, String> attrs = new HashMap<>();
                if (opts.containsKey("bind")) {
                    attrs.put("+lite.bind.topic", opts.get("bind"));
                }
                if (opts.containsKey("wildcard")) {
                    attrs.put("+lite.sub.wildcard", "true");
                }
                if (opts.containsKey("exclusive")) {
                    attrs.put("+lite.sub.model", "Exclusive");
                }
                // The event-set cap of each client of the group (the broker
                // refuses less than 10); a line without it leaves an earlier
                // value in place.
                if (opts.containsKey("event-cap")) {
                    attrs.put("+lite.sub.client.max.event.cnt", opts.get("event-cap"));
                }
                gc.setAttributes(attrs);
                admin.createAndUpdateSubscriptionGroupConfig(addr, gc);
                System.out.println("group " + f[1] + " " + opts);
                break;
            }
            case "user": {
                if (f.length < 3) {
                    throw new IllegalArgumentException("user <name> <password> [super] [disabled]");
                }
                List<String> flags = Arrays.asList(f).subList(3, f.length);
                for (String flag : flags) {
                    if (!flag.equals("super") && !flag.equals("disabled")) {
                        throw new IllegalArgumentException("user " + f[1] + ": unknown option " + flag);
                    }
                }
                String type = flags.contains("super") ? "Super" : "Normal";
                String status = flags.contains("disabled") ? "disable" : "enable";
                if (!userExists(admin, addr, f[1])) {
                    admin.createUser(addr, f[1], f[2], type);
                }
                admin.updateUser(addr, f[1], f[2], type, status);
                System.out.println("user " + f[1] + " " + type + " " + status);
                break;
            }
            case "acl": {
                if (f.length < 5 || !(f[4].equals("allow") || f[4].equals("deny"))) {
                    throw new IllegalArgumentException("acl <user> <resources> <actions> allow|deny [ip=...]");
                }
                String subject = "User:" + f[1];
                if (aclCleared.add(subject)) {
                    try {
                        admin.deleteAcl(addr, subject, null);
                    } catch (Exception e) {
                        // no ACL yet
                    }
                }
                List<String> ips = null;
                for (int i = 5; i < f.length; i++) {
                    if (!f[i].startsWith("ip=")) {
                        throw new IllegalArgumentException("acl " + f[1] + ": unknown option " + f[i]);
                    }
                    ips = Arrays.asList(f[i].substring(3).split(","));
                }
                String decision = f[4].equals("allow") ? "Allow" : "Deny";
                admin.createAcl(addr, subject, Arrays.asList(f[2].split(",")), Arrays.asList(f[3].split(",")), ips, decision);
                System.out.println("acl " + subject + " " + f[2] + " " + f[3] + " " + decision + (ips == null ? "" : " " + ips));
                break;
            }
            default:
                throw new IllegalArgumentException("unknown fixture kind " + f[0]);
        }
    }
}
