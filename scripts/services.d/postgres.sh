# shellcheck shell=bash
# The postgres service of scripts/services, which sources this file.
#
# A PostgreSQL server from Debian's packages, on its own data dir (made with
# initdb on a fresh start), listening on 127.0.0.1 only, its unix socket in
# the state dir. Role `tenure` (password below, scram-sha-256 over TCP) owns
# database `tenure`; the socket, trusted, serves only to set them up. TCP
# clients may speak TLS (or not): the server's certificate is signed by a
# CA made on the spot, and a second, unrelated CA lets tests present an
# untrusted chain.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

# Settings (see the top of scripts/services).
POSTGRES_PORT="${TENURE_POSTGRES_PORT:-54320}"

POSTGRES_USER=tenure
POSTGRES_PASSWORD=tenure-secret
POSTGRES_DB=tenure
# The server's superuser (made by initdb), reached only through the socket.
POSTGRES_SUPERUSER=postgres
# The system user Debian's package creates, which runs the server when this
# script runs as root.
POSTGRES_OS_USER=postgres

postgres_socket_dir() { echo "$STATE/postgres-socket"; }

postgres_certs_dir() { echo "$STATE/postgres-certs"; }

# The newest installed server's bin dir (Debian installs each major version
# side by side), or else what pg_config names.
postgres_bindir() {
    local dir best
    best=$(for dir in /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/postgres" ]; then echo "$dir"; fi
    done | sort -V | tail -n 1)
    if [ -z "$best" ] && command -v pg_config >/dev/null 2>&1; then
        dir=$(pg_config --bindir 2>/dev/null || true)
        if [ -n "$dir" ] && [ -x "$dir/postgres" ]; then best=$dir; fi
    fi
    [ -n "$best" ] || die "no PostgreSQL server found (in /usr/lib/postgresql/*/bin or pg_config --bindir); is postgresql installed?"
    echo "$best"
}

# PostgreSQL refuses to run as root, so as root its programs run as
# POSTGRES_OS_USER; otherwise as ourselves. Prints the words to put in front
# of a command, one a line. setpriv execs the program in place (runuser
# would fork it and stay its parent), so the pid that launch records is the
# server's own, and stop's signal reaches the server. The environment is
# reset to that user's (HOME, PATH), so nothing of root's leaks in.
postgres_as() {
    [ "$(id -u)" -eq 0 ] || return 0
    id -u "$POSTGRES_OS_USER" >/dev/null 2>&1 \
        || die "running as root, and there is no '$POSTGRES_OS_USER' user to run PostgreSQL as (Debian's postgresql package creates it)"
    printf '%s\n' setpriv --reuid="$POSTGRES_OS_USER" --regid="$POSTGRES_OS_USER" --init-groups --reset-env --
}

postgres_packages() {
    echo postgresql openssl
}

# Debian's package creates and starts a system cluster on 5432.
postgres_after_install() {
    stop_system_service postgresql 5432 'postgres -D'
}

postgres_describe() { echo "$HOST:$POSTGRES_PORT"; }

postgres_url() {
    echo "postgresql://$POSTGRES_USER:$POSTGRES_PASSWORD@$HOST:$POSTGRES_PORT/$POSTGRES_DB"
}

postgres_exports() {
    echo "export TENURE_POSTGRES=$(postgres_url)"
    # The CA that signed the server's certificate, and one that did not.
    echo "export TENURE_POSTGRES_TLS_CA=$(postgres_certs_dir)/ca.pem"
    echo "export TENURE_POSTGRES_TLS_OTHER_CA=$(postgres_certs_dir)/other-ca.pem"
}

# pg_isready succeeds only once the server accepts connections (not while
# it starts up, recovers or shuts down); it does not log in, so it answers
# before postgres_ready has made the role.
postgres_answers() {
    local bin
    bin=$(postgres_bindir) || return 1
    "$bin/pg_isready" -q -t 3 -h "$HOST" -p "$POSTGRES_PORT" -U "$POSTGRES_USER" -d "$POSTGRES_DB" >/dev/null 2>&1
}

# SIGTERM is a "smart" shutdown, which waits for every client to
# disconnect: with a test's pool open, stop would wait, then SIGKILL the
# server, and a restart would recover it. SIGINT is a "fast" shutdown: it
# disconnects the clients, rolls back their transactions, writes everything
# out and exits.
postgres_stop_signal() { echo INT; }

postgres_start() {
    local conf="$STATE/postgres-conf" log sock data bin path certs as=()
    data=$(datadir postgres)
    sock=$(postgres_socket_dir)
    certs=$(postgres_certs_dir)
    log=$(logfile postgres)
    bin=$(postgres_bindir)
    mapfile -t as < <(postgres_as)
    [ "$(id -u)" -ne 0 ] || [ "${#as[@]}" -gt 0 ] || die "cannot run PostgreSQL as root"
    # A restart keeps the data: the server recovers its roles and tables.
    [ -n "${KEEP_DATA:-}" ] || rm -rf "$data" "$certs"
    mkdir -p "$conf" "$data" "$sock" "$certs"
    chmod 700 "$certs"
    if [ ! -f "$certs/server.pem" ]; then
        make_cas "$certs"
        sign_cert "$certs" server "$HOST" serverAuth || die "openssl could not sign PostgreSQL's certificate"
    fi
    # The server refuses a key that others may read.
    chmod 600 "$certs/server-key.pem"
    # initdb and the server insist that only their user may read the data
    # dir; and the socket, trusted, must be reachable by that user alone.
    chmod 700 "$data" "$sock"
    : >>"$log"
    if [ "${#as[@]}" -gt 0 ]; then
        chown "$POSTGRES_OS_USER:" "$data" "$sock" "$log" "$certs" "$certs/server.pem" "$certs/server-key.pem"
        # Search permission on the state dir, which we made, for that user.
        chmod a+x "$STATE"
    fi
    for path in "$data" "$sock" "$log" "$certs/server-key.pem"; do
        "${as[@]}" test -w "$path" \
            || die "the server's user cannot write $path (every dir above it must be searchable by that user); set TENURE_SERVICES_STATE to a dir under /tmp"
    done
    cat >"$conf/postgresql.conf" <<CONF
# Written by scripts/services; rewritten on every start. Replaces the
# postgresql.conf that initdb wrote into the data dir.
listen_addresses = '$HOST'
port = $POSTGRES_PORT
unix_socket_directories = '$sock'
unix_socket_permissions = 0700
hba_file = '$conf/pg_hba.conf'
ident_file = '$conf/pg_ident.conf'
# Tests open many connections (a pool or more each, in parallel).
max_connections = 200
shared_buffers = 128MB
password_encryption = 'scram-sha-256'
# The data lives only as long as the test run (stop wipes it), so surviving
# a crash of the machine is worth nothing, while flushing every commit to
# disk slows the tests' many small transactions down. A stop or restart
# still shuts down cleanly, writing everything out, so a restart keeps the
# data; and if the server itself is killed, the WAL in the page cache
# recovers it.
fsync = off
synchronous_commit = off
full_page_writes = off
timezone = 'UTC'
log_timezone = 'UTC'
datestyle = 'iso, mdy'
lc_messages = 'C'
log_line_prefix = '%m [%p] %q%u@%d '
# TLS for the TCP clients that ask for it (the others stay plaintext).
ssl = on
ssl_cert_file = '$certs/server.pem'
ssl_key_file = '$certs/server-key.pem'
CONF
    cat >"$conf/pg_hba.conf" <<'HBA'
# Written by scripts/services; rewritten on every start.
# TYPE  DATABASE  USER  ADDRESS       METHOD
# The socket is in the state dir and only the server's user (and root) may
# reach it: trusted, for the setup as the superuser.
local   all       all                 trust
# Clients log in with a password over TCP, and only from 127.0.0.1.
host    all       all   127.0.0.1/32  scram-sha-256
HBA
    : >"$conf/pg_ident.conf"
    chmod 644 "$conf/postgresql.conf" "$conf/pg_hba.conf" "$conf/pg_ident.conf"
    # Fresh data is made by initdb; kept data already is. Run from the state
    # dir: the server's user may not be able to enter our working dir.
    if [ ! -f "$data/PG_VERSION" ]; then
        if ! (cd "$STATE" && "${as[@]}" "$bin/initdb" -D "$data" -U "$POSTGRES_SUPERUSER" \
            --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C --no-sync) \
            >"$STATE/postgres-initdb.log" 2>&1; then
            tail -n 40 "$STATE/postgres-initdb.log" >&2
            die "initdb could not make the PostgreSQL data dir $data (see $STATE/postgres-initdb.log)"
        fi
    fi
    (cd "$STATE" && launch postgres "${as[@]}" "$bin/postgres" -D "$data" -c config_file="$conf/postgresql.conf")
}

# psql as the superuser, through the socket.
postgres_admin_psql() {
    "$(postgres_bindir)/psql" -X -q -v ON_ERROR_STOP=1 -h "$(postgres_socket_dir)" \
        -p "$POSTGRES_PORT" -U "$POSTGRES_SUPERUSER" -d postgres "$@"
}

# Whether the tests' role logs in over TCP with its password.
postgres_logs_in() {
    [ "$("$(postgres_bindir)/psql" -X -qAt -d "$(postgres_url)" -c 'select 1' 2>/dev/null)" = 1 ]
}

# The role and its database, unless they are there already (a restart keeps
# them; a reused server has them), made through the socket, so that no
# failed login attempt lands in the log; then a login with the password.
postgres_ready() {
    local log="$STATE/postgres-setup.log"
    # \gexec runs each statement the query yields: CREATE DATABASE cannot
    # run in a DO block (it cannot run inside a transaction).
    postgres_admin_psql -v user="$POSTGRES_USER" -v password="$POSTGRES_PASSWORD" -v db="$POSTGRES_DB" \
        >"$log" 2>&1 <<'SQL' || { tail -n 20 "$log" >&2; die "could not make the PostgreSQL role and database"; }
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'user', :'password')
    WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user')
\gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
    WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db')
\gexec
SQL
    postgres_logs_in || die "the role $POSTGRES_USER cannot log in at $(postgres_describe) with its password (see $(logfile postgres))"
}
