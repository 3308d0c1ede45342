# shellcheck shell=bash
# The functions the services of scripts/services share, which it sources
# before the services' own files (services.d/<service>.sh): messages,
# certificates, package installs, pid files, launching a server, waiting
# until it answers, stopping it, and a cluster's nodes.

# STATE, HOST, CLUSTER_SIZE and the other shared settings are set by
# scripts/services before it sources this file: used here, assigned there.
# shellcheck disable=SC2154

say() { echo "services: $*" >&2; }
die() { echo "services: error: $*" >&2; exit 1; }

# The export lines of the certificates make_cas and sign_cert wrote in
# DIR, each named PREFIX_<what>: the CA, the client's certificate and key,
# and a CA that signed nothing the server trusts.
cert_exports() {
    local prefix=$1 dir=$2
    echo "export ${prefix}_CA=$dir/ca.pem"
    echo "export ${prefix}_CERT=$dir/client.pem"
    echo "export ${prefix}_KEY=$dir/client-key.pem"
    echo "export ${prefix}_OTHER_CA=$dir/other-ca.pem"
}

# A CA in `dir` (ca.pem), and a second, unrelated one (other-ca.pem) for
# presenting an untrusted chain; each valid two days.
make_cas() {
    local dir=$1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" \
        -days 2 -subj "/CN=tenure test CA" 2>/dev/null || die "openssl could not make a CA"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/other-ca-key.pem" \
        -out "$dir/other-ca.pem" -days 2 -subj "/CN=another CA" 2>/dev/null \
        || die "openssl could not make a CA"
}

# A certificate the CA in `dir` signs for `cn` with `usage`, valid two days.
sign_cert() {
    local dir=$1 name=$2 cn=$3 usage=$4 ext
    ext="$dir/$name.ext"
    printf 'subjectAltName=IP:%s,DNS:localhost\nextendedKeyUsage=%s\n' "$HOST" "$usage" >"$ext"
    openssl req -newkey rsa:2048 -nodes -keyout "$dir/$name-key.pem" -out "$dir/$name.csr" \
        -subj "/CN=$cn" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
        -CAcreateserial -out "$dir/$name.pem" -days 2 -extfile "$ext" 2>/dev/null
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

installed() {
    dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

# Installs the given Debian packages that are not installed yet. Runs
# `apt-get update` only if one of them is unknown to apt (or the install fails
# on stale lists). Returns 0 if it installed anything, 1 if nothing was needed.
install_missing() {
    local missing=() pkg need_update=0 log="$STATE/apt.log"
    for pkg in "$@"; do
        installed "$pkg" || missing+=("$pkg")
    done
    [ "${#missing[@]}" -gt 0 ] || return 1
    say "installing ${missing[*]} (log: $log)"
    for pkg in "${missing[@]}"; do
        apt-cache show --no-all-versions "$pkg" >/dev/null 2>&1 || need_update=1
    done
    if [ "$need_update" -eq 1 ]; then
        as_root apt-get update -qq >>"$log" 2>&1 || { tail -n 40 "$log" >&2; die "apt-get update failed"; }
    fi
    if ! as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
        say "install failed; retrying after apt-get update"
        as_root apt-get update -qq >>"$log" 2>&1 || true
        as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
            || { tail -n 40 "$log" >&2; die "could not install ${missing[*]}"; }
    fi
    return 0
}

# Debian may start the packaged servers on their default ports when the
# packages are installed. We never use those; stop them so they don't sit on
# memory. Only called right after this script installed packages, and only
# touches listeners on the default port whose command line names the server.
stop_system_service() {
    local name=$1 port=$2 pattern=$3 pid
    port_open "$port" || return 0
    say "stopping the system $name service that the install started on port $port"
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        as_root systemctl stop "$name" >/dev/null 2>&1 || true
    elif command -v service >/dev/null 2>&1; then
        as_root service "$name" stop >/dev/null 2>&1 || true
    fi
    sleep 1
    port_open "$port" || return 0
    for pid in $(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$pattern"; then
            as_root kill "$pid" 2>/dev/null || true
        fi
    done
}

port_open() {
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

pidfile() { echo "$STATE/$1.pid"; }
logfile() { echo "$STATE/$1.log"; }
datadir() { echo "$STATE/$1-data"; }

# The pid recorded for a service, if that process is alive and is still the
# server we started (guards against pid reuse). Prints nothing otherwise.
live_pid() {
    local svc=$1 file pid
    file=$(pidfile "$svc")
    [ -f "$file" ] || return 0
    pid=$(cat "$file" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE" || return 0
    echo "$pid"
}

# Whether a process is still there. A zombie (dead, not yet reaped by its
# parent) counts as gone: it holds no port and no file any more.
alive() {
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 1
    ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# A cluster is a service that runs CLUSTER_SIZE processes, its nodes
# <service>-1 .. <service>-3, each with its own pid file, log and data dir
# (pidfile, logfile, datadir and launch take a node's name as they take a
# service's). On top of the functions every service has, a cluster defines
# <service>_node_start N (launches node N on fresh data, or on its kept data
# if KEEP_DATA is set), <service>_node_answers N, <service>_node_describe N
# and <service>_leader (prints the number of the leading node, fails if
# none leads). The commands treat a cluster as running when all its nodes
# do; `node` and `leader` work on one node.
is_cluster() { declare -F "${1}_node_start" >/dev/null; }

node_name() { echo "$1-$2"; }

# The clusters, as `a|b` for messages.
cluster_names() {
    local svc names=()
    for svc in "${SERVICES[@]}"; do
        if is_cluster "$svc"; then names+=("$svc"); fi
    done
    (IFS='|' && echo "${names[*]}")
}

# The processes of a service, one name a line: the service itself, or a
# cluster's nodes.
processes() {
    local svc=$1 n
    if is_cluster "$svc"; then
        for n in $(seq "$CLUSTER_SIZE"); do node_name "$svc" "$n"; done
    else
        echo "$svc"
    fi
}

# The live pids of a service's processes, space-separated; empty if none runs.
live_pids() {
    local proc pid pids=()
    for proc in $(processes "$1"); do
        pid=$(live_pid "$proc")
        if [ -n "$pid" ]; then pids+=("$pid"); fi
    done
    echo "${pids[*]}"
}

# The processes of a service that do not run, space-separated.
dead_processes() {
    local proc dead=()
    for proc in $(processes "$1"); do
        if [ -z "$(live_pid "$proc")" ]; then dead+=("$proc"); fi
    done
    echo "${dead[*]}"
}

# "pid 12" or "pids 12 13 14", for messages.
pids_text() {
    case "$1" in
        *' '*) echo "pids $1" ;;
        *) echo "pid $1" ;;
    esac
}

# Runs a server in the background, detached from this script: own session,
# stdin from /dev/null, stdout/stderr into its log (so `$(scripts/services
# start)` does not wait on it), lock fd closed. Records its pid.
launch() {
    local svc=$1
    shift
    : >"$(logfile "$svc")"
    # shellcheck disable=SC2016  # expanded by the inner shell
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$(pidfile "$svc")" "$@" \
        </dev/null >>"$(logfile "$svc")" 2>&1 9>&- &
    # Wait for the pid file to be written by the child.
    for _ in $(seq 50); do
        [ -s "$(pidfile "$svc")" ] && return 0
        sleep 0.1
    done
    die "$svc did not start (no pid file)"
}

# Waits until a service answers, or with a node number, until that node of
# a cluster does; fails if one of its processes exits meanwhile, and stops
# them if they do not answer within WAIT_SECONDS.
wait_until_answers() {
    local svc=$1 node=${2:-} deadline=$((SECONDS + WAIT_SECONDS)) what proc check procs=() logs=()
    if [ -n "$node" ]; then
        what=$(node_name "$svc" "$node")
        procs=("$what")
        check=("${svc}_node_answers" "$node")
    else
        what=$svc
        mapfile -t procs < <(processes "$svc")
        check=("${svc}_answers")
    fi
    while ! "${check[@]}"; do
        for proc in "${procs[@]}"; do
            if [ -z "$(live_pid "$proc")" ]; then
                say "$proc exited during start-up; last 40 lines of $(logfile "$proc"):"
                tail -n 40 "$(logfile "$proc")" >&2 || true
                die "$what failed to start"
            fi
        done
        if [ "$SECONDS" -ge "$deadline" ]; then
            for proc in "${procs[@]}"; do
                say "$proc did not answer within ${WAIT_SECONDS}s; last 40 lines of $(logfile "$proc"):"
                tail -n 40 "$(logfile "$proc")" >&2 || true
                logs+=("$(logfile "$proc")")
            done
            stop_processes "${procs[@]}"
            die "$what started but did not answer within ${WAIT_SECONDS}s (stopped it); see ${logs[*]}"
        fi
        sleep 0.2
    done
}

# Sends a process `signal` (TERM unless given), and SIGKILL if it is still
# there 5 s later; returns once it is gone (or 2 s after the SIGKILL).
kill_pid() {
    local pid=$1 signal=${2:-TERM}
    kill "-$signal" "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        alive "$pid" || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 20); do
        alive "$pid" || return 0
        sleep 0.1
    done
}

# Stops the named processes (services or cluster nodes) and removes their
# pid files; their data stays. One after another, not all at once: an etcd
# leader that gets SIGTERM hands its leadership to a follower first, and if
# that follower is shutting down too, it hands it back, and the first waits
# seconds for a transfer that never completes. A service whose server
# takes another signal to stop promptly names it in <service>_stop_signal.
stop_processes() {
    local proc pid signal
    for proc in "$@"; do
        pid=$(live_pid "$proc")
        if [ -n "$pid" ]; then
            signal=TERM
            if declare -F "${proc}_stop_signal" >/dev/null; then signal=$("${proc}_stop_signal"); fi
            kill_pid "$pid" "$signal"
            ! alive "$pid" || die "$proc (pid $pid) did not exit"
        fi
        rm -f "$(pidfile "$proc")"
    done
}
