# shellcheck shell=bash
# The zkcluster service of scripts/services, which sources this file.
#
# A three-node ZooKeeper ensemble, for tests that kill or stop a node (the
# leader, say) under the members and watch them carry on. Node N serves
# clients on ZK_CLUSTER_PORT+N-1; the nodes talk to each other on the quorum
# ports (10 up: followers to the leader) and the leader election ports (20
# up). Each node is a QuorumPeerMain of its own with its own conf dir, data
# dir and myid, run as the single server is.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
ZK_CLUSTER_PORT="${TENURE_ZK_CLUSTER_PORT:-21821}"

zkcluster_port() { echo $((ZK_CLUSTER_PORT + $1 - 1)); }

# The ports node N's peers reach it on (quorum, leader election): what
# `link cut` cuts (links.sh).
zkcluster_peer_ports() { echo $((ZK_CLUSTER_PORT + 10 + $1 - 1)) $((ZK_CLUSTER_PORT + 20 + $1 - 1)); }

zkcluster_packages() {
    echo zookeeper nftables
}

# The single server's, in case only the cluster is started.
zkcluster_after_install() {
    zookeeper_after_install
}

zkcluster_node_describe() { echo "$HOST:$(zkcluster_port "$1")"; }

# The connect string: every node's address, comma-separated.
zkcluster_describe() {
    local n nodes=()
    for n in $(seq "$CLUSTER_SIZE"); do nodes+=("$(zkcluster_node_describe "$n")"); done
    (IFS=, && echo "${nodes[*]}")
}

zkcluster_exports() {
    echo "export TENURE_ZOOKEEPER_CLUSTER=$(zkcluster_describe)"
}

# A node answers once it is the leader or a follower, that is, it is part
# of a quorum and serves requests.
zkcluster_node_answers() {
    case "$(zk_mode "$(zkcluster_port "$1")")" in
        leader | follower) return 0 ;;
        *) return 1 ;;
    esac
}

zkcluster_answers() {
    local n
    for n in $(seq "$CLUSTER_SIZE"); do
        zkcluster_node_answers "$n" || return 1
    done
}

# The node that says `Mode: leader`, if exactly one does (a leader that lost
# its followers keeps saying so for up to syncLimit ticks).
zkcluster_leader() {
    local n leaders=()
    for n in $(seq "$CLUSTER_SIZE"); do
        if [ "$(zk_mode "$(zkcluster_port "$n")")" = leader ]; then leaders+=("$n"); fi
    done
    [ "${#leaders[@]}" -eq 1 ] || return 1
    echo "${leaders[0]}"
}

zkcluster_node_start() {
    local n=$1 name conf data i as_node=()
    name=$(node_name zkcluster "$n")
    conf="$STATE/$name-conf"
    data=$(datadir "$name")
    # A node started again keeps its data (snapshot and transaction log): it
    # rejoins, and the leader sends it what it missed. A node with no data
    # would rejoin as well, fetching a full snapshot.
    [ -n "${KEEP_DATA:-}" ] || rm -rf "$data"
    mkdir -p "$conf" "$data"
    echo "$n" >"$data/myid"
    # Short ticks and limits, so that a dead leader is noticed and a new one
    # elected within seconds: followers give up on a silent leader after
    # syncLimit ticks, and initLimit bounds a follower's sync with a new
    # leader (generous, for a busy machine).
    {
        cat <<CFG
# Written by scripts/services; rewritten on every start.
tickTime=500
initLimit=20
syncLimit=4
dataDir=$data
clientPort=$(zkcluster_port "$n")
clientPortAddress=$HOST
$(zookeeper_shared_settings)
CFG
        for i in $(seq "$CLUSTER_SIZE"); do
            echo "server.$i=$HOST:$((ZK_CLUSTER_PORT + 10 + i - 1)):$((ZK_CLUSTER_PORT + 20 + i - 1))"
        done
    } >"$conf/zoo.cfg"
    zookeeper_log4j "$conf"
    links_install zkcluster
    read -r -a as_node <<<"$(run_as_node zkcluster "$n" "$data")"
    launch "$name" "${as_node[@]}" java -Xmx128m \
        -Dzookeeper.log.dir="$STATE" \
        -Dzookeeper.root.logger=INFO,CONSOLE \
        -Dlog4j.configuration="file:$conf/log4j.properties" \
        -cp "$(zookeeper_classpath "$conf")" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf/zoo.cfg"
}

zkcluster_start() {
    local n
    for n in $(seq "$CLUSTER_SIZE"); do zkcluster_node_start "$n"; done
}
