#!/usr/bin/env bash
# Runs a real Apache RocketMQ (name server, broker, a proxy in Cluster mode, and
# a second proxy with authentication and ACL 2.0 on; four JVMs) on 127.0.0.1
# for rmqflow's tests. Cluster mode, not Local: in
# 5.5.0 only the cluster proxy serves SyncLiteSubscription (Local mode's
# LiteSubscriptionService is null). The jars come from Maven Central
# through mvn; everything it writes stays under $RMQ_STATE (outside git).
#
#   scripts/rocketmq.sh up       fetch if needed, start (idempotent), create fixtures
#   scripts/rocketmq.sh down     stop what `up` started
#   scripts/rocketmq.sh restart-proxy  stop and start only the proxy (the broker
#                                and name server stay up); returns when its
#                                gRPC port serves again
#   scripts/rocketmq.sh status   print whether it runs and its endpoint
#   scripts/rocketmq.sh fetch    only resolve the jars
#   scripts/rocketmq.sh logs     print the tail of every log (used when a run fails)
#   scripts/rocketmq.sh env      print the environment the Go tests read
#   scripts/rocketmq.sh apply FILE  create the topics and groups of FILE (the
#                                format of scripts/rocketmq/fixtures.txt) on the
#                                running broker: one JVM for the whole file
#   scripts/rocketmq.sh conf     print the broker.conf `up` would start the
#                                broker with (written to a temporary directory:
#                                starts and changes nothing)
#   scripts/rocketmq.sh lite     print the lite dispatch lines of the broker.conf
#                                the running broker was started with (nothing:
#                                the 5.5.0 defaults; the bench harness reads it)
#   scripts/rocketmq.sh profiles print the names RMQ_LITE_PROFILE takes, one a
#                                line (the bench harness finds the running
#                                broker's profile among them)
#   scripts/rocketmq.sh pids     print "name pid" of each running JVM
#                                (namesrv, broker, proxy; the benchmarks
#                                sample these three, not the auth proxy)
#
# The auth proxy (conformance scenario t) serves the same broker with
# authenticationEnabled and authorizationEnabled on; its users and ACLs are
# those of scripts/rocketmq/users.txt, kept in the broker's store (the broker
# has the metadata providers but checks nothing itself, so the first proxy,
# mqadmin and the fixtures need no credentials).
#
# Settings (environment):
#   RMQ_VERSION      RocketMQ version (default 5.5.0; see docs/broker-semantics.md
#                    for why not 5.5.1)
#   RMQ_STATE        state directory (default <repo>/.cache/rocketmq)
#   RMQ_NAMESRV_PORT name server port (default 19876)
#   RMQ_GRPC_PORT    proxy gRPC port (default 18081)
#   RMQ_BROKER_PORT  broker remoting port (default 18911; it also uses -2 and +1)
#   RMQ_PROXY_REMOTING_PORT  proxy remoting port (default 18080)
#   RMQ_AUTH_GRPC_PORT  auth proxy gRPC port (default 18082)
#   RMQ_AUTH_PROXY_REMOTING_PORT  auth proxy remoting port (default 18083)
#   RMQ_AUTH_PROXY   0: `up` does not start the auth proxy (default 1)
#   RMQ_HEAP         max heap of each JVM (default 1g)
#   RMQ_MIN_LITE_TTL_MS, RMQ_LITE_TTL_CHECK_MS  broker.conf minLiteTTl and
#                    liteTtlCheckInterval (default 0 and 20000, for conformance
#                    scenario u; the 5.5.0 defaults are 900000 and 120000; the
#                    many profile's scan interval is 120000)
#   RMQ_LITE_PROFILE  lite dispatch of the broker (docs/operations-lite.md):
#                    default (the 5.5.0 settings, nothing written) or many
#                    (many lite topics per wildcard group: 20000 lite topics
#                    per client event set, 1 s scan and full-dispatch delays,
#                    the RocksDB store, consumer offsets persisted per commit,
#                    the lite TTL scan every 2 min)
#   RMQ_MAX_CLIENT_EVENT_COUNT, RMQ_LITE_EVENT_CHECK_MS,
#   RMQ_LITE_FULL_DISPATCH_DELAY_MS, RMQ_LITE_CLIENT_FULL_DISPATCH_DELAY_MS
#                    broker.conf maxClientEventCount, liteEventCheckInterval,
#                    liteEventFullDispatchDelayTimeForWildcardGroup and
#                    liteEventFullDispatchDelayTime, each over the profile
#                    (5.5.0 defaults: 100, 10000, 10000, 10000). Read by `up`
#                    when it starts the broker (and by `conf`); a running
#                    broker keeps its settings until down and up
#   RMQ_STORE_TYPE   broker.conf storeType: default (consume queues in mapped
#                    files, one per lite topic, each holding a file descriptor
#                    for the broker's life) or defaultRocksDB (consume queues,
#                    offsets and metadata in RocksDB); default: the profile's
#                    (many: defaultRocksDB), else nothing written (5.5.0: default)
#   RMQ_BROKER_CONF  more broker.conf lines, KEY=VALUE separated by spaces,
#                    written last (a key given twice: the broker takes the
#                    last); for experiments (docs/operations-lite.md)
#   RMQ_START_TIMEOUT seconds to wait for the gRPC port (default 120)
#   RMQ_PROXY_STOP_GRACE  seconds restart-proxy lets the proxy exit before
#                    killing it (default 3)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

RMQ_VERSION=${RMQ_VERSION:-5.5.0}
RMQ_STATE=${RMQ_STATE:-$repo/.cache/rocketmq}
RMQ_NAMESRV_PORT=${RMQ_NAMESRV_PORT:-19876}
RMQ_GRPC_PORT=${RMQ_GRPC_PORT:-18081}
RMQ_BROKER_PORT=${RMQ_BROKER_PORT:-18911}
RMQ_PROXY_REMOTING_PORT=${RMQ_PROXY_REMOTING_PORT:-18080}
RMQ_MIN_LITE_TTL_MS=${RMQ_MIN_LITE_TTL_MS:-0}
RMQ_LITE_TTL_CHECK_MS=${RMQ_LITE_TTL_CHECK_MS:-} # empty: the profile's (write_conf)
RMQ_LITE_PROFILE=${RMQ_LITE_PROFILE:-default}
RMQ_AUTH_GRPC_PORT=${RMQ_AUTH_GRPC_PORT:-18082}
RMQ_AUTH_PROXY_REMOTING_PORT=${RMQ_AUTH_PROXY_REMOTING_PORT:-18083}
RMQ_HEAP=${RMQ_HEAP:-1g}
RMQ_START_TIMEOUT=${RMQ_START_TIMEOUT:-120}

run="$RMQ_STATE/run"
cpfile="$RMQ_STATE/classpath-$RMQ_VERSION.txt"
namesrv_addr="127.0.0.1:$RMQ_NAMESRV_PORT"
endpoint="127.0.0.1:$RMQ_GRPC_PORT"
auth_endpoint="127.0.0.1:$RMQ_AUTH_GRPC_PORT"
cluster=DefaultCluster

log() { printf 'rocketmq: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

fetch() {
  [ -s "$cpfile" ] && return 0
  command -v mvn >/dev/null || die "mvn not found: install Maven (and Java 17) to fetch RocketMQ"
  command -v java >/dev/null || die "java not found: install Java 17"
  mkdir -p "$RMQ_STATE"
  log "resolving org.apache.rocketmq:rocketmq-{namesrv,proxy,tools}:$RMQ_VERSION from Maven Central"
  if ! mvn -q -B -f "$here/rocketmq/pom.xml" -Drocketmq.version="$RMQ_VERSION" \
      dependency:build-classpath -Dmdep.outputFile="$cpfile.tmp" -DincludeScope=runtime \
      >"$RMQ_STATE/mvn.log" 2>&1; then
    cat "$RMQ_STATE/mvn.log" >&2
    die "mvn could not resolve RocketMQ $RMQ_VERSION"
  fi
  mv "$cpfile.tmp" "$cpfile"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_alive() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

# The lite dispatch profiles RMQ_LITE_PROFILE takes (lite_conf).
lite_profiles="default many"

# lite_conf prints the broker.conf lines of the lite dispatch settings:
# RMQ_LITE_PROFILE's, each overridden by its own variable; nothing for the
# 5.5.0 defaults.
lite_conf() {
  local events="" check="" delay="" client_delay="" store="" incremental=""
  case "$RMQ_LITE_PROFILE" in
    default | "") ;;
    many) events=20000 check=1000 delay=1000 client_delay=1000 store=defaultRocksDB incremental=true ;;
    *) die "RMQ_LITE_PROFILE=$RMQ_LITE_PROFILE: want one of: $lite_profiles" ;;
  esac
  store=${RMQ_STORE_TYPE:-$store}
  case "$store" in
    "" | default | defaultRocksDB) ;;
    *) die "RMQ_STORE_TYPE=$store: want default or defaultRocksDB" ;;
  esac
  events=${RMQ_MAX_CLIENT_EVENT_COUNT:-$events}
  check=${RMQ_LITE_EVENT_CHECK_MS:-$check}
  delay=${RMQ_LITE_FULL_DISPATCH_DELAY_MS:-$delay}
  client_delay=${RMQ_LITE_CLIENT_FULL_DISPATCH_DELAY_MS:-$client_delay}
  local v
  for v in "$events" "$check" "$delay" "$client_delay"; do
    [ -z "$v" ] || [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "lite dispatch setting \"$v\": want a positive whole number"
  done
  [ -z "$events$check$delay$client_delay$store" ] && return 0
  echo "# Lite dispatch (RMQ_LITE_PROFILE=$RMQ_LITE_PROFILE; docs/operations-lite.md)."
  [ -z "$store" ] || echo "storeType=$store"
  # With the RocksDB store, each commit writes its own offset instead of the
  # whole table being rewritten every 5 s (a table that grows with every lite
  # topic a group has read).
  [ -z "$incremental" ] || echo "persistConsumerOffsetIncrementally=$incremental"
  [ -z "$events" ] || echo "maxClientEventCount=$events"
  [ -z "$check" ] || echo "liteEventCheckInterval=$check"
  [ -z "$delay" ] || echo "liteEventFullDispatchDelayTimeForWildcardGroup=$delay"
  [ -z "$client_delay" ] || echo "liteEventFullDispatchDelayTime=$client_delay"
}

write_conf() {
  local ttl_check=$RMQ_LITE_TTL_CHECK_MS
  if [ -z "$ttl_check" ]; then
    ttl_check=20000
    [ "$RMQ_LITE_PROFILE" = many ] && ttl_check=120000
  fi
  mkdir -p "$run/conf" "$run/store" "$run/home"
  cat >"$run/conf/namesrv.conf" <<CONF
listenPort=$RMQ_NAMESRV_PORT
bindAddress=127.0.0.1
CONF
  cat >"$run/conf/broker.conf" <<CONF
brokerClusterName=$cluster
brokerName=broker-a
brokerId=0
namesrvAddr=$namesrv_addr
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
listenPort=$RMQ_BROKER_PORT
storePathRootDir=$run/store
storePathCommitLog=$run/store/commitlog
mappedFileSizeCommitLog=134217728
deleteWhen=04
fileReservedTime=24
diskMaxUsedSpaceRatio=95
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
enableLmq=true
enableMultiDispatch=true
autoCreateTopicEnable=false
autoCreateSubscriptionGroup=false
# RecallMessage (off by default in 5.5.0: every recall fails "operation is
# forbidden"); conformance scenario r recalls delayed messages.
recallMessageEnable=true
# Lite topic TTL: the scan that deletes expired lite topics runs from the
# start and every RMQ_LITE_TTL_CHECK_MS (5.5.0 defaults: 15 min, 2 min), so
# that conformance scenario u sees a 1-minute TTL act within 105 s. The same
# scan also deletes, whatever the TTL, a lite topic whose queue it finds empty
# (max offset 0) on 6 scans in a row: 2 min at this interval (30 s at 5 s, too
# short for the other suites' lite topics, which may wait that long for their
# first message). make bench keeps the defaults. The many profile scans every
# 2 min (5.5.0's default): each scan reads every lite topic's last store time.
minLiteTTl=$RMQ_MIN_LITE_TTL_MS
liteTtlCheckInterval=$ttl_check
# The store of users and ACLs (ACL 2.0) the auth proxy reads; the broker itself
# authenticates nothing (authenticationEnabled stays false).
authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider
authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider
CONF
  lite_conf >>"$run/conf/broker.conf"
  if [ -n "${RMQ_BROKER_CONF:-}" ]; then
    local kv
    echo "# RMQ_BROKER_CONF" >>"$run/conf/broker.conf"
    for kv in $RMQ_BROKER_CONF; do
      [[ "$kv" =~ ^[A-Za-z][A-Za-z0-9_.]*=[^=]*$ ]] || die "RMQ_BROKER_CONF: \"$kv\" is not KEY=VALUE"
      echo "$kv" >>"$run/conf/broker.conf"
    done
  fi
  cat >"$run/conf/rmq-proxy.json" <<CONF
{
  "rocketMQClusterName": "$cluster",
  "namesrvAddr": "$namesrv_addr",
  "proxyMode": "cluster",
  "grpcServerPort": $RMQ_GRPC_PORT,
  "remotingListenPort": $RMQ_PROXY_REMOTING_PORT,
  "localServeAddr": "127.0.0.1"
}
CONF
  write_auth_conf
}

# write_auth_conf writes the auth proxy's configuration: the first proxy's
# plus authentication and authorization, with users and ACLs loaded from the
# broker (cached, refreshed every second instead of every 20).
write_auth_conf() {
  mkdir -p "$run/conf" "$run/home-auth"
  cat >"$run/conf/rmq-proxy-auth.json" <<CONF
{
  "rocketMQClusterName": "$cluster",
  "namesrvAddr": "$namesrv_addr",
  "proxyMode": "cluster",
  "grpcServerPort": $RMQ_AUTH_GRPC_PORT,
  "remotingListenPort": $RMQ_AUTH_PROXY_REMOTING_PORT,
  "localServeAddr": "127.0.0.1",
  "authenticationEnabled": true,
  "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
  "authorizationEnabled": true,
  "authorizationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
  "userCacheRefreshSeconds": 1,
  "aclCacheRefreshSeconds": 1
}
CONF
}

jvm() {
  # $1 name, rest: main class and args. setsid: the JVM gets a session of its
  # own, so that a signal to the process group of whoever started it (a test
  # binary that restarted the proxy, a shell job ending) does not take it down.
  # RMQ_JVM_HOME: the JVM's home (its logs go under it; default $run/home).
  local name=$1 home=${RMQ_JVM_HOME:-$run/home}; shift
  setsid java -server -Xms128m -Xmx"${RMQ_JVM_HEAP:-$RMQ_HEAP}" -XX:MaxDirectMemorySize=512m -XX:+UseG1GC \
    -Duser.home="$home" -Drocketmq.home.dir="$home" \
    -Dcom.rocketmq.proxy.configPath="$run/conf/rmq-proxy.json" \
    -Drocketmq.client.logUseSlf4j=false \
    -cp "$(cat "$cpfile")" "$@" >"$run/$name.out" 2>&1 &
  echo $! >"$run/$name.pid"
}

mqadmin() {
  java -Xmx256m -Duser.home="$run/home" -Drocketmq.home.dir="$run/home" \
    -cp "$(cat "$cpfile")" org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$namesrv_addr"
}

wait_port() {
  local port=$1 what=$2 pidname=$3 deadline=$((SECONDS + RMQ_START_TIMEOUT))
  until port_open "$port"; do
    pid_alive "$pidname" || { logs; die "$what exited before its port $port opened"; }
    [ $SECONDS -lt $deadline ] || { logs; die "$what did not open port $port within ${RMQ_START_TIMEOUT}s"; }
    sleep 0.5
  done
}

# wait_log waits for a line in a JVM's console output.
wait_log() {
  local file=$1 text=$2 what=$3 pidname=$4 deadline=$((SECONDS + RMQ_START_TIMEOUT))
  until grep -q "$text" "$file" 2>/dev/null; do
    pid_alive "$pidname" || { logs; die "$what exited before logging \"$text\""; }
    [ $SECONDS -lt $deadline ] || { logs; die "$what did not log \"$text\" within ${RMQ_START_TIMEOUT}s"; }
    sleep 0.5
  done
}

# wait_port_quiet waits for a port; it fails (without dying) when the process
# exits first.
wait_port_quiet() {
  local port=$1 pidname=$2 deadline=$((SECONDS + RMQ_START_TIMEOUT))
  until port_open "$port"; do
    pid_alive "$pidname" || return 1
    [ $SECONDS -lt $deadline ] || { logs; die "$pidname did not open port $port within ${RMQ_START_TIMEOUT}s"; }
    sleep 0.5
  done
}

# start_proxy starts the proxy JVM and waits for its gRPC port. The proxy exits
# when the broker's cluster is not yet in the name server's routes ("No topic
# route info ... DefaultCluster"); the registration follows the broker's boot by
# a moment, so it gets a few tries. With arguments (name, gRPC port, config,
# home) it starts another proxy the same way: the auth proxy.
start_proxy() {
  local name=${1:-proxy} port=${2:-$RMQ_GRPC_PORT} conf=${3:-$run/conf/rmq-proxy.json} home=${4:-$run/home} try
  for try in 1 2 3 4 5; do
    RMQ_JVM_HOME=$home jvm "$name" org.apache.rocketmq.proxy.ProxyStartup -pm cluster -pc "$conf" -n "$namesrv_addr"
    if wait_port_quiet "$port" "$name"; then
      return 0
    fi
    [ "$try" -lt 5 ] || { logs; die "$name did not start after $try tries"; }
    log "$name exited before its port opened (try $try); retrying"
    sleep 2
  done
}

# start_auth_proxy starts the auth proxy unless it serves already. The broker
# must have been started with the metadata providers of write_conf (a broker
# started by an older version of this script has not: it is not restarted
# behind the back of whoever uses it; the error says what to do).
start_auth_proxy() {
  if [ "${RMQ_AUTH_PROXY:-1}" = 0 ] || { pid_alive proxy-auth && port_open "$RMQ_AUTH_GRPC_PORT"; }; then
    return 0
  fi
  [ -f "$run/broker.auth" ] || die "the running broker was started without the ACL metadata providers the auth proxy needs (an older scripts/rocketmq.sh): restart it with scripts/rocketmq.sh down && scripts/rocketmq.sh up"
  if port_open "$RMQ_AUTH_GRPC_PORT" && ! pid_alive proxy-auth; then
    die "port $RMQ_AUTH_GRPC_PORT is taken by something this script did not start"
  fi
  pid_alive proxy-auth && stop_pid proxy-auth 6
  write_auth_conf
  local t0=$SECONDS
  # It serves one scenario's few requests: a smaller heap.
  RMQ_JVM_HEAP=512m start_proxy proxy-auth "$RMQ_AUTH_GRPC_PORT" "$run/conf/rmq-proxy-auth.json" "$run/home-auth"
  log "auth proxy started in $((SECONDS - t0))s"
}

stop_pid() {
  # $1 name, $2 grace in half seconds (default 60): TERM, then KILL after the grace
  local pid
  pid_alive "$1" || { rm -f "$run/$1.pid"; return 0; }
  pid=$(cat "$run/$1.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 "${2:-60}"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
  log "stopped $1 ($pid)"
  rm -f "$run/$1.pid"
}

# restart_proxy stops and starts only the proxy JVM (the name server and the
# broker stay up, and so do their store and lite subscriptions) and returns
# once the new proxy's gRPC port accepts connections. Clients see their
# connections and Telemetry streams cut for the restart (about 10 s).
restart_proxy() {
  pid_alive broker && pid_alive namesrv || die "the broker is not running (scripts/rocketmq.sh up first)"
  local t0=$SECONDS
  # The proxy closes its gRPC port at once on TERM but takes about 20 s to
  # exit gracefully; RMQ_PROXY_STOP_GRACE seconds (default 3) are given, then
  # it is killed, as a crashed proxy would be.
  stop_pid proxy $((2 * ${RMQ_PROXY_STOP_GRACE:-3}))
  local deadline=$((SECONDS + 30))
  while port_open "$RMQ_GRPC_PORT"; do
    [ $SECONDS -lt $deadline ] || die "port $RMQ_GRPC_PORT still open after the proxy stopped"
    sleep 0.2
  done
  start_proxy
  log "proxy restarted in $((SECONDS - t0))s"
  echo "$endpoint"
}

# map_count: every lite topic's consume queue is a memory-mapped file of the
# broker, so 100,000 lite topics (the bench's topics scenario) need more maps
# than Linux allows by default (vm.max_map_count 65530): the broker then
# answers sends with "create mapped file failed, server is busy or broken".
# As RocketMQ's own bin/os.sh does, raise it when root; else say so.
map_count() {
  local want=262144 have
  have=$(cat /proc/sys/vm/max_map_count 2>/dev/null) || return 0
  [ "$have" -ge "$want" ] && return 0
  if [ "$(id -u)" = 0 ] && echo "$want" >/proc/sys/vm/max_map_count 2>/dev/null; then
    log "raised vm.max_map_count from $have to $want (one mapped file per lite topic)"
  else
    log "warning: vm.max_map_count is $have; more than about 60,000 lite topics need $want (sysctl -w vm.max_map_count=$want as root)"
  fi
}

# open_files: with the default store the broker keeps a file descriptor open
# for every consume queue file, one per lite topic, for its whole life: at
# the open-files limit it answers sends with "create mapped file failed"
# (store.log: "Too many open files"). The soft limit is raised to the hard
# one; a hard limit below what the broker may need is only reported (raising
# it takes root outside a container that forbids it, 2026-12-03 here: 20,000).
open_files() {
  local want=1048576 have hard
  have=$(ulimit -n) hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$have" != unlimited ] && [ "$have" -lt "$hard" ]; then
    ulimit -n "$hard" 2>/dev/null && have=$hard
  fi
  [ "$have" = unlimited ] || [ "$have" -ge "$want" ] && return 0
  ulimit -Hn "$want" 2>/dev/null && ulimit -n "$want" 2>/dev/null && return 0
  case "$(lite_conf | sed -n 's/^storeType=//p')" in
    defaultRocksDB) ;;
    *) log "warning: open files limit $have: with the default store the broker holds a descriptor per lite topic (fewer than $have lite topics fit; RMQ_STORE_TYPE=defaultRocksDB or RMQ_LITE_PROFILE=many keeps them in RocksDB)" ;;
  esac
}

up() {
  fetch
  map_count
  open_files
  if pid_alive proxy && port_open "$RMQ_GRPC_PORT"; then
    log "already running at $endpoint"
  else
    # A JVM of ours may have died alone (a crashed proxy): start what is
    # missing. A port held by a process this script did not start is fatal.
    if { port_open "$RMQ_GRPC_PORT" && ! pid_alive proxy; } || { port_open "$RMQ_NAMESRV_PORT" && ! pid_alive namesrv; }; then
      die "port $RMQ_GRPC_PORT or $RMQ_NAMESRV_PORT is taken by something this script did not start"
    fi
    if pid_alive proxy; then
      stop_pid proxy 6 # alive but not serving: start it afresh
    fi
    write_conf
    local t0=$SECONDS
    pid_alive namesrv || RMQ_JVM_HEAP=256m jvm namesrv org.apache.rocketmq.namesrv.NamesrvStartup -c "$run/conf/namesrv.conf"
    wait_port "$RMQ_NAMESRV_PORT" "name server" namesrv
    if ! pid_alive broker; then
      jvm broker org.apache.rocketmq.broker.BrokerStartup -c "$run/conf/broker.conf"
      : >"$run/broker.auth" # this broker has the ACL metadata providers
    fi
    wait_port "$RMQ_BROKER_PORT" "broker" broker
    wait_log "$run/broker.out" "boot success" "broker" broker
    # The two proxies start side by side (each waits for its own port).
    start_auth_proxy &
    local auth_job=$!
    start_proxy
    wait "$auth_job" || die "the auth proxy did not start"
    log "started in $((SECONDS - t0))s"
  fi
  start_auth_proxy
  fixtures
  echo "$endpoint"
}

# The fixtures every test relies on. Names are fixed so tests can find them; see
# internal/rmqtest for the Go side.
fixtures() {
  # The marker holds the checksum of the fixtures file it was made from: an
  # edited fixtures.txt is applied again to a running broker (creating a topic
  # or group that exists only updates it).
  local marker="$run/fixtures.done" sum
  sum=$(cat "$here/rocketmq/fixtures.txt" "$here/rocketmq/users.txt" | cksum)
  [ -f "$marker" ] && [ "$(cat "$marker")" = "$sum" ] && return 0
  local deadline=$((SECONDS + RMQ_START_TIMEOUT))
  # The broker registers with the name server a moment after the gRPC port opens.
  until mqadmin clusterList 2>/dev/null | grep -q broker-a; do
    [ $SECONDS -lt $deadline ] || { logs; die "broker did not register with the name server"; }
    sleep 1
  done
  java -Xmx256m -Duser.home="$run/home" -Drocketmq.home.dir="$run/home" \
    -cp "$(cat "$cpfile")" "$here/rocketmq/Fixtures.java" "$namesrv_addr" "$cluster" "$here/rocketmq/fixtures.txt" "$here/rocketmq/users.txt" \
    >"$run/fixtures.out" 2>&1 || { cat "$run/fixtures.out" >&2; die "creating fixtures failed"; }
  echo "$sum" >"$marker"
  log "fixtures created"
}

# apply creates the topics and groups of an arbitrary fixtures file.
apply() {
  local file=${1:?usage: scripts/rocketmq.sh apply FILE}
  [ -f "$file" ] || die "no such fixtures file: $file"
  status >/dev/null || die "the broker is not running (scripts/rocketmq.sh up)"
  java -Xmx256m -Duser.home="$run/home" -Drocketmq.home.dir="$run/home" \
    -cp "$(cat "$cpfile")" "$here/rocketmq/Fixtures.java" "$namesrv_addr" "$cluster" "$file" \
    >"$run/apply.out" 2>&1 || { cat "$run/apply.out" >&2; die "applying $file failed"; }
}

pids() {
  local name
  for name in namesrv broker proxy; do
    pid_alive "$name" && echo "$name $(cat "$run/$name.pid")"
  done
  return 0
}

down() {
  local name
  # The proxies take up to 20 s each to exit: stopped side by side.
  stop_pid proxy-auth &
  stop_pid proxy
  wait
  for name in broker namesrv; do
    stop_pid "$name"
  done
  # A fresh start gets a fresh store: fixtures and messages of earlier runs go away.
  rm -rf "$run/store" "$run/fixtures.done" "$run/broker.auth"
}

# lite prints the lite dispatch settings of the running broker: the lines
# lite_conf wrote into its broker.conf when `up` started it.
lite() {
  status >/dev/null || die "the broker is not running (scripts/rocketmq.sh up)"
  [ -f "$run/conf/broker.conf" ] || die "no broker.conf in $run/conf"
  sed -n '/^# Lite dispatch/,$p' "$run/conf/broker.conf" | grep -v '^#' || true
}

status() {
  if pid_alive proxy && port_open "$RMQ_GRPC_PORT"; then
    echo "running: $endpoint (name server $namesrv_addr)"
  else
    echo "not running"; return 1
  fi
}

logs() {
  local f
  for f in "$run"/*.out "$run"/home/logs/rocketmqlogs/{proxy,broker,broker_default,namesrv}.log "$run"/home-auth/logs/rocketmqlogs/{proxy,auth_audit}.log; do
    [ -f "$f" ] || continue
    printf '==== %s (last 60 lines)\n' "$f" >&2
    tail -n 60 "$f" >&2
  done
}

case "${1:-}" in
  fetch) fetch; echo "$cpfile" ;;
  up) up ;;
  down) down ;;
  restart-proxy) restart_proxy ;;
  status) status ;;
  logs) logs ;;
  env) echo "RMQFLOW_ENDPOINT=$endpoint"; echo "RMQFLOW_AUTH_ENDPOINT=$auth_endpoint"; echo "RMQFLOW_BROKER_ADDR=127.0.0.1:$RMQ_BROKER_PORT" ;;
  apply) apply "${2:-}" ;;
  pids) pids ;;
  conf) run=$(mktemp -d); write_conf; cat "$run/conf/broker.conf"; rm -rf "$run" ;;
  lite) lite ;;
  profiles) printf '%s\n' $lite_profiles ;;
  *) sed -n '2,80p' "$0"; exit 2 ;;
esac
