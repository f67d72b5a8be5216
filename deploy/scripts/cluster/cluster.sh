#!/usr/bin/env bash
# A ClickHouse cluster on one machine, for cfgd's cluster tests: Debian's
# ZooKeeper and four ClickHouse 18.16 servers, two shards of two replicas
# each (cluster name "cfgd"), every one on its own ports with its data and
# pid file under $CFGD_DATA_DIR/cluster (default ./data/cluster). Stopped by
# pid, never by name, so the local stack's own server is never touched.
#
#   deploy/scripts/cluster/cluster.sh up            install what is missing, start what is not running
#   deploy/scripts/cluster/cluster.sh down          stop everything this script started
#   deploy/scripts/cluster/cluster.sh status        one line per server
#   deploy/scripts/cluster/cluster.sh kill NODE     SIGKILL one server (s1r1, s1r2, s2r1, s2r2)
#   deploy/scripts/cluster/cluster.sh start NODE    start one server again
#   deploy/scripts/cluster/cluster.sh start zookeeper   start ZooKeeper again (make chaos restarts it after a kill -9)
#   deploy/scripts/cluster/cluster.sh nodes         print NODE TCP_PORT per line
#
# Ports: ZooKeeper $CFGD_CLUSTER_ZK_PORT (2181); node i (1..4) listens on TCP
# 9100+i, HTTP 8200+i and interserver 9200+i (shifted by $CFGD_CLUSTER_PORT_SHIFT).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
DATA="$(mkdir -p "${CFGD_DATA_DIR:-$ROOT/data}" && cd "${CFGD_DATA_DIR:-$ROOT/data}" && pwd)"
[ -f "$DATA/go.mod" ] || printf 'module cfgd.invalid/data\n' >"$DATA/go.mod"
DIR="$DATA/cluster"
SHIFT="${CFGD_CLUSTER_PORT_SHIFT:-0}"
ZK_PORT="${CFGD_CLUSTER_ZK_PORT:-2181}"
NODES=(s1r1 s1r2 s2r1 s2r2)
# shellcheck source=../lib/clickhouse.sh
. "$ROOT/deploy/scripts/lib/clickhouse.sh"

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pid_alive() { [ -f "$1" ] && kill -0 "$(head -n1 "$1")" 2>/dev/null; }

index_of() { local i; for i in "${!NODES[@]}"; do [ "${NODES[$i]}" = "$1" ] && { echo $((i + 1)); return; }; done; die "unknown node $1 (one of ${NODES[*]})"; }
tcp_port() { echo $((9100 + $1 + SHIFT)); }
http_port() { echo $((8200 + $1 + SHIFT)); }
inter_port() { echo $((9200 + $1 + SHIFT)); }

ensure_packages() {
	local missing=()
	[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
	[ -f /usr/share/java/slf4j-simple.jar ] || missing+=(libslf4j-java)
	command -v java >/dev/null || missing+=(default-jre-headless)
	command -v clickhouse-server >/dev/null || [ -x /usr/sbin/clickhouse-server ] || missing+=(clickhouse-server clickhouse-client)
	if [ "${#missing[@]}" -gt 0 ]; then
		log "installing ${missing[*]} (apt-get)"
		as_root apt-get update -qq
		DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

# --- ZooKeeper ------------------------------------------------------------
# Bounded: a connection accepted while the server starts may never be answered.
zk_mode() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' _ "$ZK_PORT" 2>/dev/null | grep -o 'Mode: [a-z]*' || true; }
zk_up() {
	local pidf="$DIR/zookeeper.pid"
	if pid_alive "$pidf" && [ -n "$(zk_mode)" ]; then log "zookeeper: already running on 127.0.0.1:$ZK_PORT"; return; fi
	port_open "$ZK_PORT" && die "zookeeper: port $ZK_PORT is taken by another process (set CFGD_CLUSTER_ZK_PORT)"
	mkdir -p "$DIR/zookeeper"
	cat >"$DIR/zookeeper/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$DIR/zookeeper
clientPortAddress=127.0.0.1
clientPort=$ZK_PORT
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat
CFG
	nohup java -Xmx256m -cp "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:$(ls /usr/share/java/netty-*.jar 2>/dev/null | tr '\n' ':')" \
		org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zookeeper/zoo.cfg" >>"$DIR/zookeeper.log" 2>&1 &
	echo $! >"$pidf"
	local i
	# ruok answers before the server serves; srvr's Mode: line does not.
	for ((i = 0; i < 300; i++)); do [ -n "$(zk_mode)" ] && { log "zookeeper: started on 127.0.0.1:$ZK_PORT"; return; }; sleep 0.1; done
	die "zookeeper did not start within 30s (see $DIR/zookeeper.log)"
}

# --- ClickHouse nodes -----------------------------------------------------
ch_config() { # node index
	local node="$1" i="$2" dir="$DIR/$1" shard="${1:1:1}"
	mkdir -p "$dir"
	local shards="" s r
	for s in 1 2; do
		shards+="<shard><internal_replication>true</internal_replication>"
		for r in 1 2; do shards+="<replica><host>127.0.0.1</host><port>$(tcp_port $(((s - 1) * 2 + r)))</port></replica>"; done
		shards+="</shard>"
	done
	cat >"$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>$DIR/$node.log</log><errorlog>$DIR/$node.err.log</errorlog></logger>
    <http_port>$(http_port "$i")</http_port>
    <tcp_port>$(tcp_port "$i")</tcp_port>
    <interserver_http_port>$(inter_port "$i")</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <listen_host>127.0.0.1</listen_host>
    <max_connections>256</max_connections>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>268435456</mark_cache_size>
$(ch_paths "$dir")
    <remote_servers><cfgd>$shards</cfgd></remote_servers>
    <zookeeper><node><host>127.0.0.1</host><port>$ZK_PORT</port></node><session_timeout_ms>10000</session_timeout_ms></zookeeper>
    <macros><shard>$shard</shard><replica>$node</replica></macros>
    <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
</yandex>
XML
	ch_users "$dir" 2000000000 in_order
}
node_up() {
	local node="$1" i pidf
	i="$(index_of "$node")"
	pidf="$DIR/$node.pid"
	if pid_alive "$pidf" && port_open "$(tcp_port "$i")"; then log "$node: already running on 127.0.0.1:$(tcp_port "$i")"; return; fi
	rm -f "$pidf"
	port_open "$(tcp_port "$i")" && die "$node: port $(tcp_port "$i") is taken by another process (set CFGD_CLUSTER_PORT_SHIFT)"
	ch_config "$node" "$i"
	# A replica killed right after a partition drop may find its parts
	# out of step with ZooKeeper: let it restore instead of refusing.
	mkdir -p "$DIR/$node/data/flags" && touch "$DIR/$node/data/flags/force_restore_data"
	"$(ch_bin)" --config-file="$DIR/$node/config.xml" --pid-file="$pidf" --daemon >>"$DIR/$node.log" 2>&1
}
node_wait() {
	local node="$1" i j
	i="$(index_of "$node")"
	for ((j = 0; j < 600; j++)); do port_open "$(tcp_port "$i")" && { log "$node: started on 127.0.0.1:$(tcp_port "$i")"; return; }; sleep 0.1; done
	die "$node did not open 127.0.0.1:$(tcp_port "$i") within 60s (see $DIR/$node.err.log)"
}
stop_pid() { # name pidfile signal
	local pidf="$2"
	pid_alive "$pidf" || { rm -f "$pidf"; return 0; }
	kill "-$3" "$(head -n1 "$pidf")" 2>/dev/null || true
	for _ in $(seq 1 150); do pid_alive "$pidf" || break; sleep 0.1; done
	rm -f "$pidf"
	log "$1: stopped ($3)"
}

case "${1:-}" in
up)
	ensure_packages
	mkdir -p "$DIR"
	zk_up
	for n in "${NODES[@]}"; do node_up "$n"; done
	for n in "${NODES[@]}"; do node_wait "$n"; done
	;;
down)
	for n in "${NODES[@]}"; do stop_pid "$n" "$DIR/$n.pid" TERM; done
	stop_pid zookeeper "$DIR/zookeeper.pid" TERM
	;;
kill) stop_pid "${2:?node}" "$DIR/$2.pid" KILL ;;
start)
	if [ "${2:?node}" = zookeeper ]; then zk_up; else index_of "$2" >/dev/null && node_up "$2" && node_wait "$2"; fi
	;;
nodes) for n in "${NODES[@]}"; do echo "$n $(tcp_port "$(index_of "$n")")"; done ;;
status)
	printf 'zookeeper %s %s\n' "$ZK_PORT" "$(zk_mode || true)"
	for n in "${NODES[@]}"; do
		i="$(index_of "$n")"
		if pid_alive "$DIR/$n.pid" && port_open "$(tcp_port "$i")"; then echo "$n $(tcp_port "$i") up"; else echo "$n $(tcp_port "$i") down"; fi
	done
	;;
*) die "usage: $0 up|down|status|kill NODE|start NODE|nodes" ;;
esac
