# shellcheck shell=bash
# The etcd service of scripts/services, which sources this file: a
# single-node etcd from Debian's packages.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
ETCD_PORT="${TENURE_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${TENURE_ETCD_PEER_PORT:-23800}"

etcd_packages() {
    echo etcd-server etcd-client
}

etcd_after_install() {
    stop_system_service etcd 2379 etcd
}

etcd_describe() { echo "http://$HOST:$ETCD_PORT"; }

etcd_exports() {
    echo "export TENURE_ETCD=http://$HOST:$ETCD_PORT"
}

etcd_answers() {
    ETCDCTL_API=3 timeout 5 etcdctl --endpoints="http://$HOST:$ETCD_PORT" \
        --dial-timeout=1s --command-timeout=2s endpoint health >/dev/null 2>&1
}

etcd_start() {
    local data peer="http://$HOST:$ETCD_PEER_PORT" client="http://$HOST:$ETCD_PORT"
    data=$(datadir etcd)
    [ -n "${KEEP_DATA:-}" ] || rm -rf "$data"
    mkdir -p "$data"
    chmod 700 "$data"
    etcd_launch_single etcd "$data" "$client" "$peer"
}

# Launches a single-node etcd as service NAME on DATA, serving clients at
# CLIENT and its peer at PEER; the arguments after those go to etcd as
# they are (TLS settings).
etcd_launch_single() {
    local name=$1 data=$2 client=$3 peer=$4
    shift 4
    launch "$name" etcd \
        --name default \
        --logger zap \
        --data-dir "$data" \
        --listen-client-urls "$client" \
        --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" \
        --initial-advertise-peer-urls "$peer" \
        --initial-cluster "default=$peer" \
        --initial-cluster-state new \
        "$@"
}
