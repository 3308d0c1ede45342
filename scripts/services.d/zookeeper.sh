# shellcheck shell=bash
# The zookeeper service of scripts/services, which sources this file: a
# single-node ZooKeeper from Debian's package. The other ZooKeeper services
# (zookeepertls.sh, zkcluster.sh) run theirs the same way, with the mode
# query, log settings and classpath defined here.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
ZK_PORT="${TENURE_ZK_PORT:-21810}"

zookeeper_packages() {
    echo zookeeper
}

zookeeper_after_install() {
    stop_system_service zookeeper 2181 zookeeper
}

zookeeper_describe() { echo "$HOST:$ZK_PORT"; }

zookeeper_exports() {
    echo "export TENURE_ZOOKEEPER=$HOST:$ZK_PORT"
}

# The mode the ZooKeeper server on `port` reports in its answer to `srvr`:
# standalone, or leader or follower in an ensemble. `srvr` answers with a
# `Mode:` line only once the server serves requests (unlike `ruok`, which
# answers `imok` as soon as the port is open); nothing is printed before, or
# while a node of an ensemble has no quorum.
zk_mode() {
    local port=$1
    # shellcheck disable=SC2016  # expanded by the inner shell
    timeout 3 bash -c '
        exec 3<>"/dev/tcp/$1/$2" || exit 1
        printf srvr >&3
        cat <&3' _ "$HOST" "$port" 2>/dev/null | sed -n 's/^Mode: //p' || true
}

zookeeper_answers() {
    [ -n "$(zk_mode "$ZK_PORT")" ]
}

# The server's log4j settings: everything to the console, which launch
# sends to the service's log file.
# What every ZooKeeper server here is configured with: sessions up to a
# minute, no limit on connections from one address, the four-letter words
# the scripts use, no admin server, no purging of snapshots.
zookeeper_shared_settings() {
    cat <<'EOF'
maxSessionTimeout=60000
maxClientCnxns=0
4lw.commands.whitelist=*
admin.enableServer=false
autopurge.purgeInterval=0
EOF
}

zookeeper_log4j() {
    local conf=$1
    cat >"$conf/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
EOF
}

# Classpath: Debian's /usr/share/java/zookeeper.jar (package libzookeeper-java)
# lists all of its dependency jars in its manifest's Class-Path, so the jar
# alone is enough to run the server. Debian's start script adds only its conf
# dir (for log4j.properties) in front. We put our own conf dir there instead
# and add the slf4j -> log4j 1.2 binding jars (both are dependencies of the
# zookeeper package) so the server log goes, via a console appender, to our
# log file.
zookeeper_classpath() {
    local conf=$1 jar cp
    jar=/usr/share/java/zookeeper.jar
    if [ ! -f "$jar" ]; then
        jar=$(dpkg -L libzookeeper-java 2>/dev/null | grep -E '/zookeeper(-[0-9.]+)?\.jar$' | head -n 1 || true)
    fi
    if [ -z "$jar" ] || [ ! -f "$jar" ]; then
        die "zookeeper.jar not found (is libzookeeper-java installed?)"
    fi
    cp="$conf:$jar"
    for jar in /usr/share/java/slf4j-log4j12.jar /usr/share/java/log4j-1.2.jar; do
        [ -f "$jar" ] && cp="$cp:$jar"
    done
    echo "$cp"
}

zookeeper_start() {
    local conf="$STATE/zookeeper-conf" data
    data=$(datadir zookeeper)
    # A restart keeps the data: the server recovers its sessions and nodes.
    [ -n "${KEEP_DATA:-}" ] || rm -rf "$data"
    mkdir -p "$conf" "$data"
    cat >"$conf/zoo.cfg" <<EOF
# Written by scripts/services; rewritten on every fresh start.
tickTime=500
dataDir=$data
clientPort=$ZK_PORT
clientPortAddress=$HOST
$(zookeeper_shared_settings)
EOF
    zookeeper_log4j "$conf"
    launch zookeeper java -Xmx256m \
        -Dzookeeper.log.dir="$STATE" \
        -Dzookeeper.root.logger=INFO,CONSOLE \
        -Dlog4j.configuration="file:$conf/log4j.properties" \
        -cp "$(zookeeper_classpath "$conf")" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf/zoo.cfg"
}
