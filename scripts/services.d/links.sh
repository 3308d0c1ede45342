# shellcheck shell=bash
# Network partitions between the nodes of a cluster, for scripts/services,
# which sources this file: `scripts/services link <cluster> cut I J` drops
# every packet between nodes I and J, both ways, until `link <cluster>
# heal`. Clients still reach every node: only the nodes' own traffic (etcd's
# peer port; ZooKeeper's quorum and election ports) is cut, so a client
# connected to a node on the minority side keeps talking to a node that
# cannot reach a quorum, as in a real partition.
#
# How: every node of a cluster runs under a user id of its own (see
# cluster_uid), and an nftables table of the cluster's own marks each
# connection with the node that opened it (conntrack's mark, set on the
# first packet from the opener's socket). A cut between I and J drops, in
# the output hook that every packet on 127.0.0.1 passes, the packets of the
# connections I opened to J's node ports and of those J opened to I's, in
# both directions: to a node, silence, as a partition makes it, with no
# reset that would tell it what happened. Connections between the other
# pairs are untouched.
#
# This needs root (user ids, nftables); not as root, the nodes run as the
# caller and `link` says why it cannot cut. The table is made before the
# cluster's nodes start (a connection opened before it has no mark and
# could not be cut) and removed by `stop`.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# The user id node N of a cluster runs as (as root), numeric: no account is
# made for it. Empty if this script does not run as root, or the cluster's
# nodes run as their caller.
cluster_uid() {
    local svc=$1 n=$2
    [ "$(id -u)" -eq 0 ] || return 0
    case "$svc" in
        zkcluster) echo $((64800 + n)) ;;
        etcdcluster) echo $((64810 + n)) ;;
    esac
}

# The conntrack mark of the connections node N opens.
cluster_mark() {
    local svc=$1 n=$2
    case "$svc" in
        zkcluster) echo $((0x7e5100 + n)) ;;
        etcdcluster) echo $((0x7e6100 + n)) ;;
    esac
}

# The cluster's nftables table, named by its first client port as well, so
# that a second set of servers (other ports, another state dir) has its
# own.
links_table() { echo "tenure_$1_$("$1_port" 1)"; }

# Gives node N's data dir to its user, and prints the command prefix that
# runs it as that user (nothing if it runs as the caller).
run_as_node() {
    local svc=$1 n=$2 data=$3 uid
    uid=$(cluster_uid "$svc" "$n")
    [ -n "$uid" ] || return 0
    chown -R "$uid:$uid" "$data"
    echo setpriv --reuid="$uid" --regid="$uid" --clear-groups --
}

# Makes the cluster's table unless it is there: a mark for each node's
# connections, and an empty chain of cuts. Not as root, or where nftables
# cannot be used (a container without CAP_NET_ADMIN), the cluster runs
# without it and `link` says why.
links_install() {
    local svc=$1 table n uid rules out
    [ "$(id -u)" -eq 0 ] || return 0
    table=$(links_table "$svc")
    if ! command -v nft >/dev/null 2>&1; then
        say "$svc: nft not found; its nodes cannot be partitioned (install nftables)"
        return 0
    fi
    nft list table inet "$table" >/dev/null 2>&1 && return 0
    rules="table inet $table {
    chain cuts {
    }
    chain output {
        type filter hook output priority 0; policy accept;"
    for n in $(seq "$CLUSTER_SIZE"); do
        uid=$(cluster_uid "$svc" "$n")
        rules+="
        ct state new meta skuid $uid ct mark set $(cluster_mark "$svc" "$n")"
    done
    rules+="
        jump cuts
    }
}"
    if ! out=$(nft -f - <<<"$rules" 2>&1); then
        say "$svc: cannot make the nftables table $table, so its nodes cannot be partitioned: $out"
    fi
}

links_remove() {
    local table
    table=$(links_table "$1")
    [ "$(id -u)" -eq 0 ] && command -v nft >/dev/null 2>&1 || return 0
    nft delete table inet "$table" 2>/dev/null || true
}

# Fails, saying why, unless the cluster's nodes can be cut: its table is
# there and every node that runs, runs as its own user (a cluster started
# before, or not as root, does not).
links_usable() {
    local svc=$1 table n pid uid actual
    [ "$(id -u)" -eq 0 ] \
        || die "cutting links between $svc's nodes needs root (a user id for each node, and nftables); run scripts/services and the tests as root"
    command -v nft >/dev/null 2>&1 \
        || die "nft not found: \`$0 start $svc\` installs nftables"
    table=$(links_table "$svc")
    nft list table inet "$table" >/dev/null 2>&1 \
        || die "$svc has no nftables table $table (see its start's messages); restart it afresh: \`$0 stop $svc && $0 start $svc\`"
    for n in $(seq "$CLUSTER_SIZE"); do
        pid=$(live_pid "$(node_name "$svc" "$n")")
        [ -n "$pid" ] || continue
        uid=$(cluster_uid "$svc" "$n")
        actual=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
        [ "$actual" = "$uid" ] \
            || die "$svc's node $n runs as uid $actual, not its own ($uid), so it cannot be cut off; restart it afresh: \`$0 stop $svc && $0 start $svc\`"
    done
}

# Cuts the link between nodes I and J, both ways.
links_cut() {
    local svc=$1 i=$2 j=$3 table from to port mark rules=""
    table=$(links_table "$svc")
    for from in "$i" "$j"; do
        to=$((i + j - from))
        mark=$(cluster_mark "$svc" "$from")
        for port in $("${svc}_peer_ports" "$to"); do
            rules+="add rule inet $table cuts ct mark $mark tcp dport $port drop
add rule inet $table cuts ct mark $mark tcp sport $port drop
"
        done
    done
    nft -f - <<<"$rules" || die "nft refused to cut $svc's nodes $i and $j"
}

# Heals every cut link of the cluster.
links_heal() {
    nft flush chain inet "$(links_table "$1")" cuts || die "nft refused to heal $1's links"
}
