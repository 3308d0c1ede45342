# shellcheck shell=bash
# The kafka service of scripts/services, which sources this file: a
# single-node Kafka in KRaft mode (one process is broker and controller, no
# ZooKeeper), its jars fetched once from Maven Central through
# scripts/kafka/pom.xml (see the top of scripts/services).

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
KAFKA_PORT="${TENURE_KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${TENURE_KAFKA_CONTROLLER_PORT:-19093}"
KAFKA_CUTTABLE_PORT="${TENURE_KAFKA_CUTTABLE_PORT:-19094}"
KAFKA_PROXY_PORT="${TENURE_KAFKA_PROXY_PORT:-19095}"
KAFKA_SECURED_PORT="${TENURE_KAFKA_SECURED_PORT:-19096}"
KAFKA_OAUTH_PORT="${TENURE_KAFKA_OAUTH_PORT:-19097}"
KAFKA_SASL_USER=tenure
KAFKA_SASL_PASSWORD=tenure-secret
KAFKA_VERSION="${TENURE_KAFKA_VERSION:-4.1.1}"
KAFKA_CACHE="${TENURE_KAFKA_CACHE:-$HOME/.cache/tenure/kafka-$KAFKA_VERSION}"

# Maven is needed only while the jar cache is not complete yet.
kafka_packages() {
    echo openssl
    if ! command -v mvn >/dev/null 2>&1 && ! kafka_cached; then
        echo maven
    fi
}

kafka_after_install() { :; }

kafka_describe() { echo "$HOST:$KAFKA_PORT"; }

kafka_exports() {
    echo "export TENURE_KAFKA=$HOST:$KAFKA_PORT"
    # Kafka's own command-line tools, for what rskafka cannot do (adding
    # partitions to a topic).
    echo "export TENURE_KAFKA_LIBS=$KAFKA_CACHE/libs"
    # A second client listener that advertises the proxy port instead of its
    # own: a client that bootstraps through a proxy on that port keeps every
    # connection (metadata and fetches) on the proxy, so a test can cut that
    # client off from the broker while the others go on.
    echo "export TENURE_KAFKA_CUTTABLE=$HOST:$KAFKA_CUTTABLE_PORT"
    echo "export TENURE_KAFKA_PROXY=$HOST:$KAFKA_PROXY_PORT"
    # A SASL_SSL listener: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 for one
    # user, behind a certificate of a CA made on the spot (and another CA,
    # which did not sign it).
    echo "export TENURE_KAFKA_SECURED=$HOST:$KAFKA_SECURED_PORT"
    echo "export TENURE_KAFKA_SECURED_CA=$STATE/kafka-certs/ca.pem"
    echo "export TENURE_KAFKA_SECURED_OTHER_CA=$STATE/kafka-certs/other-ca.pem"
    echo "export TENURE_KAFKA_SECURED_USER=$KAFKA_SASL_USER"
    echo "export TENURE_KAFKA_SECURED_PASSWORD=$KAFKA_SASL_PASSWORD"
    # A SASL_PLAINTEXT listener for OAUTHBEARER only, whose validator is
    # Kafka's own for unsecured JWTs (`"alg":"none"`, no signature): it
    # checks the token's form, `sub` and its times (`iat`, `exp`), enough
    # for a client's side of the mechanism.
    echo "export TENURE_KAFKA_OAUTH=$HOST:$KAFKA_OAUTH_PORT"
}

# The broker's certificate (for the SASL_SSL listener) and its CA, in a
# PKCS12 keystore, and an unrelated CA for tests of an untrusted chain.
kafka_certs() {
    local dir=$1
    mkdir -p "$dir"
    chmod 700 "$dir"
    [ -f "$dir/broker.p12" ] && return 0
    printf 'subjectAltName=IP:%s,DNS:localhost\nextendedKeyUsage=serverAuth\n' "$HOST" >"$dir/broker.ext"
    {
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" \
            -days 2 -subj "/CN=tenure test Kafka CA" &&
            openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/other-ca-key.pem" \
                -out "$dir/other-ca.pem" -days 2 -subj "/CN=another CA" &&
            openssl req -newkey rsa:2048 -nodes -keyout "$dir/broker-key.pem" \
                -out "$dir/broker.csr" -subj "/CN=$HOST" &&
            openssl x509 -req -in "$dir/broker.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
                -CAcreateserial -out "$dir/broker.pem" -days 2 -extfile "$dir/broker.ext" &&
            openssl pkcs12 -export -in "$dir/broker.pem" -inkey "$dir/broker-key.pem" \
                -certfile "$dir/ca.pem" -out "$dir/broker.p12" -passout pass:changeit
    } >"$dir/openssl.log" 2>&1 || { tail -n 20 "$dir/openssl.log" >&2; die "openssl could not make Kafka's certificates"; }
}

# Sends a Metadata (v4) request and checks that the answer lists broker 1 at
# our address. The broker opens its client port only once it has caught up
# with the metadata log and is unfenced, and this answer comes from its
# metadata cache, so a broker that passes serves requests (topic creation,
# produce, fetch), not just accepts connections. Takes a few milliseconds,
# unlike a JVM admin tool (about 2 s).
kafka_answers() {
    local response want
    # shellcheck disable=SC2016  # expanded by the inner shell
    response=$(timeout 3 bash -c '
        exec 3<>"/dev/tcp/$1/$2" || exit 1
        # size 21; api key 3 (Metadata), version 4, correlation id 1,
        # client id "tenure"; all topics (null array), no auto-creation.
        printf "\x00\x00\x00\x15\x00\x03\x00\x04\x00\x00\x00\x01\x00\x06tenure\xff\xff\xff\xff\x00" >&3
        len=$(head -c 4 <&3 | od -An -tu1 | awk "{ print \$1 * 16777216 + \$2 * 65536 + \$3 * 256 + \$4 }")
        [ "${len:-0}" -gt 0 ] && [ "$len" -lt 1048576 ] || exit 1
        head -c "$len" <&3 | od -An -v -tx1 | tr -d " \n"' _ "$HOST" "$KAFKA_PORT" 2>/dev/null) || return 1
    # Correlation id 1 first; then, in the broker list: node id 1, host
    # (int16 length and bytes), port.
    want=$(printf '%08x%04x%s%08x' 1 "${#HOST}" "$(printf %s "$HOST" | od -An -v -tx1 | tr -d ' \n')" "$KAFKA_PORT")
    [[ "$response" == 00000001* && "$response" == *"$want"* ]]
}

kafka_marker() { echo "$KAFKA_CACHE/complete"; }

# What a complete cache must have been fetched with: the version and the pom.
kafka_marker_text() {
    echo "kafka $KAFKA_VERSION pom $(sha256sum <"$SCRIPTS/kafka/pom.xml" | cut -d' ' -f1)"
}

kafka_cached() {
    [ -d "$KAFKA_CACHE/libs" ] && [ "$(cat "$(kafka_marker)" 2>/dev/null)" = "$(kafka_marker_text)" ]
}

# Prints the dir holding the broker's jars (and the tools'), fetching them
# from Maven Central first unless a complete copy for this version and pom is
# cached. The copy goes to a temporary dir and is renamed into place, and the
# marker is written last, so an interrupted fetch is redone, never used.
kafka_libs() {
    local log="$STATE/kafka-fetch.log" tmp="$KAFKA_CACHE/libs.partial"
    if ! kafka_cached; then
        command -v mvn >/dev/null 2>&1 || die "mvn not found (needed once to fetch Kafka $KAFKA_VERSION)"
        say "fetching Kafka $KAFKA_VERSION from Maven Central into $KAFKA_CACHE (log: $log)"
        mkdir -p "$KAFKA_CACHE"
        rm -rf "$KAFKA_CACHE/libs" "$tmp" "$(kafka_marker)"
        # Run on a copy, so that Maven writes nothing into the source tree.
        cp "$SCRIPTS/kafka/pom.xml" "$KAFKA_CACHE/pom.xml"
        if ! mvn -B -q -f "$KAFKA_CACHE/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
            dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
            >"$log" 2>&1; then
            tail -n 40 "$log" >&2
            die "could not fetch Kafka $KAFKA_VERSION (see $log)"
        fi
        [ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ] \
            || die "the fetch did not produce kafka_2.13-$KAFKA_VERSION.jar (see $log)"
        mv "$tmp" "$KAFKA_CACHE/libs"
        kafka_marker_text >"$(kafka_marker)"
    fi
    echo "$KAFKA_CACHE/libs"
}

# A Kafka cluster id: 16 random bytes, base64url without padding (what
# `kafka-storage.sh random-uuid` prints, without starting a JVM for it).
# Like Kafka's own, never one that starts with `-`: the storage tool would
# read it as an option and fail (one start in 64).
kafka_cluster_id() {
    local id=-
    while [ "${id:0:1}" = "-" ]; do
        id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    done
    echo "$id"
}

kafka_start() {
    local conf="$STATE/kafka-conf" data libs major log4j
    data=$(datadir kafka)
    major=$(java -version 2>&1 | sed -n '1s/.*version "\([0-9]*\).*/\1/p')
    [ "${major:-0}" -ge 17 ] || die "Kafka $KAFKA_VERSION needs Java 17 or later; \`java\` is ${major:-unknown}"
    libs=$(kafka_libs)
    # A restart keeps the data: topics, offsets and the metadata log survive.
    [ -n "${KEEP_DATA:-}" ] || rm -rf "$data" "$STATE/kafka-certs"
    mkdir -p "$conf" "$data"
    kafka_certs "$STATE/kafka-certs"
    local certs="$STATE/kafka-certs"
    cat >"$conf/server.properties" <<PROPERTIES
# Written by scripts/services; rewritten on every start.
# One process is both the KRaft controller and the broker.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT,CUTTABLE://$HOST:$KAFKA_CUTTABLE_PORT,SASL_SSL://$HOST:$KAFKA_SECURED_PORT,OAUTH://$HOST:$KAFKA_OAUTH_PORT
# CUTTABLE names the proxy a test puts in front of it (see kafka_exports).
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CUTTABLE://$HOST:$KAFKA_PROXY_PORT,SASL_SSL://$HOST:$KAFKA_SECURED_PORT,OAUTH://$HOST:$KAFKA_OAUTH_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,CUTTABLE:PLAINTEXT,SASL_SSL:SASL_SSL,OAUTH:SASL_PLAINTEXT
# The secured listener: TLS, and SASL with PLAIN (users below) and SCRAM
# (users written into the metadata log when the storage is formatted).
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USER="$KAFKA_SASL_PASSWORD";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$certs/broker.p12
listener.name.sasl_ssl.ssl.keystore.password=changeit
listener.name.sasl_ssl.ssl.key.password=changeit
# The OAuth listener: OAUTHBEARER only, tokens checked by Kafka's validator
# of unsecured JWTs (the login module's options name the broker's own
# token, which it never uses here: no broker speaks OAUTHBEARER to it).
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler
inter.broker.listener.name=PLAINTEXT
log.dirs=$data
num.partitions=1
auto.create.topics.enable=false
# A single broker: every internal topic has one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.segment.bytes=16777216
PROPERTIES
    log4j="$conf/log4j2.properties"
    cat >"$log4j" <<'LOG4J'
# Everything to stdout, which launch sends to the service's log file.
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
LOG4J
    # Fresh data is formatted with a new cluster id; kept data already is.
    if [ ! -f "$data/meta.properties" ]; then
        if ! java -Xmx256m -Dlog4j2.configurationFile="file:$log4j" -cp "$libs/*" \
            kafka.tools.StorageTool format -t "$(kafka_cluster_id)" -c "$conf/server.properties" \
            --add-scram "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" \
            --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" \
            >"$conf/format.log" 2>&1; then
            tail -n 40 "$conf/format.log" >&2
            die "could not format the Kafka storage in $data"
        fi
    fi
    launch kafka java -Xmx512m -Xms256m \
        -Dlog4j2.configurationFile="file:$log4j" \
        -cp "$libs/*" \
        kafka.Kafka "$conf/server.properties"
}
