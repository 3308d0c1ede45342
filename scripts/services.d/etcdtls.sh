# shellcheck shell=bash
# The etcdtls service of scripts/services, which sources this file.
#
# A second etcd that only a client with a certificate signed by its CA may
# reach over TLS, with `auth enable`: user `tenure` (read-write on every key)
# and `root`. Its certificates are made on the spot with openssl; a second,
# unrelated CA lets tests present an untrusted chain.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
ETCD_TLS_PORT="${TENURE_ETCD_TLS_PORT:-23791}"
ETCD_TLS_PEER_PORT="${TENURE_ETCD_TLS_PEER_PORT:-23801}"

ETCD_TLS_USER=tenure
ETCD_TLS_PASSWORD=tenure-secret
ETCD_TLS_ROOT_PASSWORD=root-secret

etcdtls_dir() { echo "$STATE/etcdtls-certs"; }

etcdtls_packages() {
    echo etcd-server etcd-client openssl
}

etcdtls_after_install() { :; }

etcdtls_describe() { echo "https://$HOST:$ETCD_TLS_PORT"; }

etcdtls_exports() {
    echo "export TENURE_ETCD_TLS=https://$HOST:$ETCD_TLS_PORT"
    cert_exports TENURE_ETCD_TLS "$(etcdtls_dir)"
    echo "export TENURE_ETCD_TLS_USER=$ETCD_TLS_USER"
    echo "export TENURE_ETCD_TLS_PASSWORD=$ETCD_TLS_PASSWORD"
}

etcdtls_ctl() {
    local dir
    dir=$(etcdtls_dir)
    ETCDCTL_API=3 timeout 10 etcdctl --endpoints="https://$HOST:$ETCD_TLS_PORT" \
        --cacert="$dir/ca.pem" --cert="$dir/client.pem" --key="$dir/client-key.pem" \
        --dial-timeout=2s --command-timeout=5s "$@"
}

etcdtls_answers() {
    # Before auth is on, and after it (as root).
    etcdtls_ctl endpoint health >/dev/null 2>&1 \
        || etcdtls_ctl --user "root:$ETCD_TLS_ROOT_PASSWORD" endpoint health >/dev/null 2>&1
}


etcdtls_start() {
    local data dir peer="http://$HOST:$ETCD_TLS_PEER_PORT" client="https://$HOST:$ETCD_TLS_PORT"
    data=$(datadir etcdtls)
    dir=$(etcdtls_dir)
    [ -n "${KEEP_DATA:-}" ] || rm -rf "$data" "$dir"
    mkdir -p "$data" "$dir"
    chmod 700 "$data" "$dir"
    if [ ! -f "$dir/client.pem" ]; then
        make_cas "$dir"
        sign_cert "$dir" server "$HOST" serverAuth,clientAuth || die "openssl could not sign"
        sign_cert "$dir" client "$ETCD_TLS_USER" clientAuth || die "openssl could not sign"
    fi
    etcd_launch_single etcdtls "$data" "$client" "$peer" \
        --cert-file "$dir/server.pem" \
        --key-file "$dir/server-key.pem" \
        --trusted-ca-file "$dir/ca.pem" \
        --client-cert-auth
}

# Users, a role and `auth enable`, once (a restart keeps them).
etcdtls_ready() {
    # Done already if root can read the role: etcdctl authenticates first,
    # which fails while auth is off (3.4 has no `auth status`).
    if etcdtls_ctl --user "root:$ETCD_TLS_ROOT_PASSWORD" role get tenure >/dev/null 2>&1; then
        return 0
    fi
    {
        etcdtls_ctl user add "root:$ETCD_TLS_ROOT_PASSWORD" &&
            etcdtls_ctl role add tenure &&
            etcdtls_ctl role grant-permission --prefix=true tenure readwrite / &&
            etcdtls_ctl user add "$ETCD_TLS_USER:$ETCD_TLS_PASSWORD" &&
            etcdtls_ctl user grant-role "$ETCD_TLS_USER" tenure &&
            etcdtls_ctl user grant-role root root &&
            etcdtls_ctl auth enable
    } >"$STATE/etcdtls-auth.log" 2>&1 || { tail -n 20 "$STATE/etcdtls-auth.log" >&2; die "could not enable auth on the secured etcd"; }
}
