# shellcheck shell=bash
# The etcdcluster service of scripts/services, which sources this file.
#
# A three-node etcd cluster (members n1, n2, n3), plaintext and without
# auth, for tests that kill or stop a node (the leader, say) under the
# members and watch them carry on. Node N serves clients on
# ETCD_CLUSTER_PORT+N-1 and its peers on the port 10 up.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
ETCD_CLUSTER_PORT="${TENURE_ETCD_CLUSTER_PORT:-23821}"

ETCD_CLUSTER_TOKEN=tenure-etcdcluster

# Whether the nodes run a pre-vote before an election: `off` (etcd 3.4's
# default, what a cluster upgraded from it often still runs) lets a node
# that comes back from a partition depose a working leader; `on` (3.5's
# default) does not. TENURE_ETCD_PRE_VOTE picks it when the cluster
# starts or restarts; the choice is kept in the state dir, so that a node
# restarted alone (`node etcdcluster start N`) runs as its peers do.
etcdcluster_pre_vote_file() { echo "$STATE/etcdcluster.pre-vote"; }

# The choice for the nodes about to start: the variable if set, else the
# one kept when they start on their data, else off.
etcdcluster_pre_vote() {
    local chosen="${TENURE_ETCD_PRE_VOTE:-}"
    if [ -z "$chosen" ] && [ -n "${KEEP_DATA:-}" ] && [ -f "$(etcdcluster_pre_vote_file)" ]; then
        chosen=$(cat "$(etcdcluster_pre_vote_file)")
    fi
    case "${chosen:-off}" in
        on | off) echo "${chosen:-off}" ;;
        *) die "TENURE_ETCD_PRE_VOTE must be on or off, not ${chosen:?}" ;;
    esac
}

etcdcluster_port() { echo $((ETCD_CLUSTER_PORT + $1 - 1)); }
etcdcluster_client_url() { echo "http://$HOST:$(etcdcluster_port "$1")"; }
etcdcluster_peer_url() { echo "http://$HOST:$((ETCD_CLUSTER_PORT + 10 + $1 - 1))"; }

# The port node N's peers reach it on: what `link cut` cuts (links.sh).
etcdcluster_peer_ports() { echo $((ETCD_CLUSTER_PORT + 10 + $1 - 1)); }

etcdcluster_packages() {
    echo etcd-server etcd-client nftables
}

# The single server's, in case only the cluster is started.
etcdcluster_after_install() {
    etcd_after_install
}

etcdcluster_node_describe() { etcdcluster_client_url "$1"; }

# Every node's client URL, comma-separated (what etcd clients take).
etcdcluster_describe() {
    local n urls=()
    for n in $(seq "$CLUSTER_SIZE"); do urls+=("$(etcdcluster_client_url "$n")"); done
    (IFS=, && echo "${urls[*]}")
}

etcdcluster_exports() {
    echo "export TENURE_ETCD_CLUSTER=$(etcdcluster_describe)"
    echo "export TENURE_ETCD_CLUSTER_PRE_VOTE=$(KEEP_DATA=1 etcdcluster_pre_vote)"
}

# etcdctl against the given endpoints (comma-separated).
etcdcluster_ctl() {
    local endpoints=$1
    shift
    ETCDCTL_API=3 timeout 10 etcdctl --endpoints="$endpoints" \
        --dial-timeout=1s --command-timeout=2s "$@"
}

# `endpoint health` reads a key through the node (a linearizable read), so a
# node that passes has a leader, a quorum and has caught up with the log.
# etcdctl waits for its whole dial timeout on a closed port, so a node that
# does not listen is not asked.
etcdcluster_node_answers() {
    port_open "$(etcdcluster_port "$1")" \
        && etcdcluster_ctl "$(etcdcluster_client_url "$1")" endpoint health >/dev/null 2>&1
}

# `endpoint health` on several endpoints fails if any of them is unhealthy.
etcdcluster_answers() {
    local n
    for n in $(seq "$CLUSTER_SIZE"); do
        port_open "$(etcdcluster_port "$n")" || return 1
    done
    etcdcluster_ctl "$(etcdcluster_describe)" endpoint health >/dev/null 2>&1
}

# `endpoint status` reports, for each endpoint that answers, its own member
# id and the leader's. The leader is the node whose id that is, provided
# every node that answers names the same leader (just after a leader died,
# the others still name it until they elect a new one). Only nodes that
# listen are asked (see etcdcluster_node_answers), so that polling this
# while a node is down is quick.
etcdcluster_leader() {
    local status url member leader n endpoints=() leaders=() found=""
    for n in $(seq "$CLUSTER_SIZE"); do
        if port_open "$(etcdcluster_port "$n")"; then endpoints+=("$(etcdcluster_client_url "$n")"); fi
    done
    [ "${#endpoints[@]}" -gt 0 ] || return 1
    # Fails if an endpoint does not answer, yet reports on the others.
    status=$(etcdcluster_ctl "$(IFS=, && echo "${endpoints[*]}")" endpoint status -w fields 2>/dev/null || true)
    while read -r url member leader; do
        [ "$leader" != 0 ] || continue
        leaders+=("$leader")
        if [ "$member" = "$leader" ]; then
            found=$((${url##*:} - ETCD_CLUSTER_PORT + 1))
        fi
    done < <(awk -F' : ' '
        $1 == "\"MemberID\"" { member = $2 }
        $1 == "\"Leader\"" { leader = $2 }
        $1 == "\"Endpoint\"" { gsub(/"/, "", $2); print $2, member, leader }' <<<"$status")
    [ -n "$found" ] || return 1
    [ "$(printf '%s\n' "${leaders[@]}" | sort -u | wc -l)" -eq 1 ] || return 1
    echo "$found"
}

etcdcluster_node_start() {
    local n=$1 name data i pre_vote members=() as_node=()
    name=$(node_name etcdcluster "$n")
    data=$(datadir "$name")
    if [ -n "${KEEP_DATA:-}" ]; then
        # On its data (its write-ahead log) a member restarts as itself and
        # catches up from the leader; etcd then ignores the --initial-*
        # flags, `new` included. Without it, etcd refuses to start ("member
        # ... has already been bootstrapped"): a member that lost its data
        # must be removed and added again, which no test needs.
        [ -d "$data/member/wal" ] || die "$name has no data in $data to rejoin the cluster with; stop and start etcdcluster"
    else
        rm -rf "$data"
    fi
    mkdir -p "$data"
    chmod 700 "$data"
    for i in $(seq "$CLUSTER_SIZE"); do members+=("n$i=$(etcdcluster_peer_url "$i")"); done
    links_install etcdcluster
    read -r -a as_node <<<"$(run_as_node etcdcluster "$n" "$data")"
    # A node that starts alone runs as its peers do.
    pre_vote=$(KEEP_DATA=1 etcdcluster_pre_vote)
    launch "$name" "${as_node[@]}" etcd \
        --name "n$n" \
        --logger zap \
        --pre-vote="$([ "$pre_vote" = on ] && echo true || echo false)" \
        --data-dir "$data" \
        --listen-client-urls "$(etcdcluster_client_url "$n")" \
        --advertise-client-urls "$(etcdcluster_client_url "$n")" \
        --listen-peer-urls "$(etcdcluster_peer_url "$n")" \
        --initial-advertise-peer-urls "$(etcdcluster_peer_url "$n")" \
        --initial-cluster "$(IFS=, && echo "${members[*]}")" \
        --initial-cluster-token "$ETCD_CLUSTER_TOKEN" \
        --initial-cluster-state new
}

etcdcluster_start() {
    local n pre_vote
    pre_vote=$(etcdcluster_pre_vote)
    echo "$pre_vote" >"$(etcdcluster_pre_vote_file)"
    say "etcdcluster: pre-vote $pre_vote"
    for n in $(seq "$CLUSTER_SIZE"); do etcdcluster_node_start "$n"; done
}
