# shellcheck shell=bash
# The zookeepertls service of scripts/services, which sources this file.
#
# A second ZooKeeper that speaks only TLS, on its `secureClientPort` (Netty,
# which Debian's ZooKeeper brings), and only to a client whose certificate
# its CA signed (`ssl.clientAuth=need`). Key and trust stores are PEM files
# made on the spot with openssl; a second, unrelated CA lets tests present
# an untrusted chain.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
ZK_TLS_PORT="${TENURE_ZK_TLS_PORT:-21811}"

zookeepertls_dir() { echo "$STATE/zookeepertls-certs"; }

zookeepertls_packages() {
    echo zookeeper openssl
}

zookeepertls_after_install() { :; }

zookeepertls_describe() { echo "$HOST:$ZK_TLS_PORT (TLS)"; }

zookeepertls_exports() {
    echo "export TENURE_ZOOKEEPER_TLS=$HOST:$ZK_TLS_PORT"
    cert_exports TENURE_ZOOKEEPER_TLS "$(zookeepertls_dir)"
}

zookeepertls_answers() {
    local dir
    dir=$(zookeepertls_dir)
    printf srvr | timeout 5 openssl s_client -quiet -connect "$HOST:$ZK_TLS_PORT" \
        -CAfile "$dir/ca.pem" -cert "$dir/client.pem" -key "$dir/client-key.pem" 2>/dev/null \
        | grep -q '^Mode: '
}

zookeepertls_start() {
    local conf="$STATE/zookeepertls-conf" data dir cp jar
    data=$(datadir zookeepertls)
    dir=$(zookeepertls_dir)
    [ -n "${KEEP_DATA:-}" ] || rm -rf "$data" "$dir"
    mkdir -p "$conf" "$data" "$dir"
    chmod 700 "$dir"
    if [ ! -f "$dir/client.pem" ]; then
        make_cas "$dir"
        sign_cert "$dir" server "$HOST" serverAuth,clientAuth || die "openssl could not sign"
        sign_cert "$dir" client tenure clientAuth || die "openssl could not sign"
        cat "$dir/server.pem" "$dir/server-key.pem" >"$dir/server-store.pem"
    fi
    cat >"$conf/zoo.cfg" <<EOF
# Written by scripts/services; rewritten on every fresh start.
tickTime=500
dataDir=$data
secureClientPort=$ZK_TLS_PORT
secureClientPortAddress=$HOST
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=$dir/server-store.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$dir/ca.pem
ssl.trustStore.type=PEM
ssl.clientAuth=need
$(zookeeper_shared_settings)
EOF
    zookeeper_log4j "$conf"
    # Netty's codec and resolver are not in zookeeper.jar's Class-Path
    # (Debian runs the plaintext server only); libnetty-java has them.
    cp=$(zookeeper_classpath "$conf")
    for jar in /usr/share/java/netty-codec.jar /usr/share/java/netty-resolver.jar; do
        [ -f "$jar" ] || die "$jar not found (is libnetty-java installed?)"
        cp="$cp:$jar"
    done
    launch zookeepertls java -Xmx128m \
        -Dzookeeper.log.dir="$STATE" \
        -Dzookeeper.root.logger=INFO,CONSOLE \
        -Dlog4j.configuration="file:$conf/log4j.properties" \
        -cp "$cp" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf/zoo.cfg"
}
