#!/usr/bin/env bash
# Start a throwaway Slurm cluster (22.05, 24.11 or 26.05) entirely on loopback under DIR.
#
#   contrib/cluster/start.sh DIR
#
# munged, MariaDB, slurmdbd, slurmctld and N slurmd (multiple-slurmd style) with fake GPUs, all
# self-contained under DIR (sockets, keys, databases, state, logs). See README.md beside this file
# for the environment variables, the layout and how to use the cluster. Stop it with stop.sh DIR.
set -Eeuo pipefail
umask 022

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
MARKER_NAME=.teamshare-cluster

usage() {
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    cat <<'EOF'
Environment (defaults in brackets):
  NODES [2]  GPUS_PER_NODE [4]  CPUS_PER_NODE [64]  NODE_MEMORY_MB [262144]
  GPU_TYPES [none]  gres type of each node's GPUs, in node order, space-separated ("h100 h100
                    a100"; "-" or a missing entry: untyped); typed GPUs are listed in
                    AccountingStorageTRES too. An entry may mix types with counts, which
                    then replace GPUS_PER_NODE for that node: "a100:1+1g.10gb:7" is one
                    whole A100 and seven MIG-like 1g.10gb slices (each its own device file)
  SHARDS [none]     gres/shard per GPU of each node, in node order, space-separated ("0 4":
                    node 2 offers 4 shards of each of its GPUs; "-", 0 or a missing entry:
                    none); any shard adds GresTypes=shard and gres/shard to accounting
  CLUSTER_NAME [teamshare-dev]
  SLURMCTLD_PORT [16817]  SLURMDBD_PORT [16819]  MARIADB_PORT [13306]  SLURMD_PORT_BASE [17001]
  TEAMSHARE_PLUGIN  path to libjob_submit_teamshare.so (enables JobSubmitPlugins=teamshare)
  TEAMSHARE_CONFIG  path to teamshare.toml (copied to DIR/etc/teamshare.toml)
  JOB_SUBMIT_PLUGINS  overrides JobSubmitPlugins ("none": no such line; "lua": stock lua plugin)
  JOB_SUBMIT_LUA    job_submit.lua to use with "lua" (default: a pass-through script)
  SLURM_CONF_EXTRA  file whose lines are appended to slurm.conf
  PARTITION_JOB_DEPTH [20]   SchedulerParameters partition_job_depth (0: Slurm's default, no
                    limit); see docs/design/governance-at-scale.md
  BF_YIELD_INTERVAL [250000]  BF_YIELD_SLEEP [50000]  SchedulerParameters bf_yield_interval
                    and bf_yield_sleep, microseconds (0: Slurm's default, 2 s and 0.5 s); see
                    docs/design/governance-at-scale.md, decision 10
  ACCOUNTD          accountd binary: runs "accountd --config ... setup-slurm --user root"
  CLUSTER_USERS [root]  users setup-slurm adds to every team account (space-separated)
  SLURM_PLUGIN_DIR  the system Slurm plugin directory [autodetected]
  READY_TIMEOUT [30]  seconds to wait for each daemon / for all nodes idle
  SMOKE_TEST [0]    1: also run one sbatch --gres=gpu:1 job to completion before reporting ready
  SKIP_APT [0]      1: never run apt-get (fail if something is missing)
EOF
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    "" | -*) usage >&2; exit 2 ;;
esac
[[ $# -eq 1 ]] || { usage >&2; exit 2; }

T0=${EPOCHREALTIME/./}
now_us() { echo "${EPOCHREALTIME/./}"; }
elapsed() { local d=$(( $(now_us) - T0 )); printf '%d.%02d' $((d / 1000000)) $(( (d % 1000000) / 10000 )); }
say() { printf '[%6ss] %s\n' "$(elapsed)" "$*"; }
die_early() { echo "start.sh: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- parameters
NODES=${NODES:-2}
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
CPUS_PER_NODE=${CPUS_PER_NODE:-64}
NODE_MEMORY_MB=${NODE_MEMORY_MB:-262144}
CLUSTER_NAME=${CLUSTER_NAME:-teamshare-dev}
SLURMCTLD_PORT=${SLURMCTLD_PORT:-16817}
SLURMDBD_PORT=${SLURMDBD_PORT:-16819}
MARIADB_PORT=${MARIADB_PORT:-13306}
SLURMD_PORT_BASE=${SLURMD_PORT_BASE:-17001}
READY_TIMEOUT=${READY_TIMEOUT:-30}
PARTITION_JOB_DEPTH=${PARTITION_JOB_DEPTH:-20}
BF_YIELD_INTERVAL=${BF_YIELD_INTERVAL:-250000}
BF_YIELD_SLEEP=${BF_YIELD_SLEEP:-50000}
SMOKE_TEST=${SMOKE_TEST:-0}
SKIP_APT=${SKIP_APT:-0}
read -r -a GPU_TYPE_OF <<<"${GPU_TYPES:-}"
read -r -a SHARDS_OF <<<"${SHARDS:-}"

for v in NODES GPUS_PER_NODE CPUS_PER_NODE NODE_MEMORY_MB SLURMCTLD_PORT SLURMDBD_PORT \
    MARIADB_PORT SLURMD_PORT_BASE READY_TIMEOUT PARTITION_JOB_DEPTH BF_YIELD_INTERVAL \
    BF_YIELD_SLEEP; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die_early "$v must be a non-negative integer (got '${!v}')"
done
((NODES >= 1 && NODES <= 64)) || die_early "NODES must be 1..64"
# Slurm takes 1..10,000,000 microseconds for both and falls back to its default otherwise.
((BF_YIELD_INTERVAL <= 10000000)) || die_early "BF_YIELD_INTERVAL must be 0..10000000 microseconds"
((BF_YIELD_SLEEP <= 10000000)) || die_early "BF_YIELD_SLEEP must be 0..10000000 microseconds"
BF_YIELD=
((BF_YIELD_INTERVAL == 0)) || BF_YIELD+=",bf_yield_interval=$BF_YIELD_INTERVAL"
((BF_YIELD_SLEEP == 0)) || BF_YIELD+=",bf_yield_sleep=$BF_YIELD_SLEEP"
((GPUS_PER_NODE >= 1 && GPUS_PER_NODE <= 64)) || die_early "GPUS_PER_NODE must be 1..64"
((${#GPU_TYPE_OF[@]} <= NODES)) || die_early "GPU_TYPES names ${#GPU_TYPE_OF[@]} types for $NODES nodes"
for t in "${GPU_TYPE_OF[@]}"; do
    [[ $t == - || $t =~ ^[A-Za-z0-9_.-]+$ || $t =~ ^[A-Za-z0-9_.-]+:[0-9]+(\+[A-Za-z0-9_.-]+:[0-9]+)*$ ]] ||
        die_early "GPU_TYPES: '$t' is neither a gres type nor TYPE:COUNT[+TYPE:COUNT...]"
done
((${#SHARDS_OF[@]} <= NODES)) || die_early "SHARDS names ${#SHARDS_OF[@]} counts for $NODES nodes"
for n in "${SHARDS_OF[@]}"; do
    [[ $n == - || $n =~ ^[0-9]+$ ]] && ((${n/-/0} <= 128)) || die_early "SHARDS: '$n' is not a count 0..128"
done
# Node i's GPUs as "TYPE COUNT" lines (TYPE "-" when untyped).
node_gres() {
    local t=${GPU_TYPE_OF[$(($1 - 1))]:-} part
    if [[ $t == *:* ]]; then
        for part in ${t//+/ }; do echo "${part%%:*} ${part##*:}"; done
    else
        echo "${t:--} $GPUS_PER_NODE"
    fi
}
# The GPU types node i carries, one a line (none when untyped).
node_type() { node_gres "$1" | awk '$1 != "-" {print $1}'; }
# How many GPU devices node i has.
node_gpus() { node_gres "$1" | awk '{n += $2} END {print n + 0}'; }
# gres/shard per GPU of node i (0: none).
node_shards() { local n=${SHARDS_OF[$(($1 - 1))]:-0}; [[ $n == - ]] && n=0; echo "$n"; }
for ((i = 1; i <= NODES; i++)); do
    g=$(node_gpus "$i")
    ((g >= 1 && g <= 64)) || die_early "node n$i would have $g GPUs (1..64)"
done
[[ $CLUSTER_NAME =~ ^[a-z0-9][a-z0-9_-]*$ ]] ||
    die_early "CLUSTER_NAME must be lower case letters, digits, '-' or '_' (got '$CLUSTER_NAME')"
for f in TEAMSHARE_PLUGIN TEAMSHARE_CONFIG SLURM_CONF_EXTRA JOB_SUBMIT_LUA; do
    if [[ -n ${!f:-} && ! -f ${!f} ]]; then die_early "$f=${!f}: no such file"; fi
done
if [[ -n ${ACCOUNTD:-} ]]; then
    [[ -f $ACCOUNTD && -x $ACCOUNTD ]] || die_early "ACCOUNTD=$ACCOUNTD: not an executable file"
    ACCOUNTD=$(cd "$(dirname "$ACCOUNTD")" && pwd -P)/$(basename "$ACCOUNTD")
fi
[[ $(id -u) -eq 0 ]] || die_early "must run as root (SlurmUser=root, munged key ownership, mknod)"

# --------------------------------------------------------------- directories
mkdir -p -- "$1" || die_early "cannot create $1"
DIR=$(cd -- "$1" && pwd -P)
[[ $DIR != / && $DIR =~ ^/[A-Za-z0-9._/+-]+$ ]] ||
    die_early "DIR must be a plain absolute path (letters, digits, . _ - + /): '$DIR'"
if [[ ! -e $DIR/$MARKER_NAME && -n $(ls -A -- "$DIR") ]]; then
    die_early "$DIR is not empty and was not created by this script (no $MARKER_NAME): refusing to use it"
fi
touch "$DIR/$MARKER_NAME"

ETC=$DIR/etc RUN=$DIR/run LOG=$DIR/log PIDS=$DIR/pids STATE=$DIR/state DB=$DIR/db
MUNGE_SOCKET=$RUN/munge/munge.socket.2
# In a directory of its own, 0700: only root (the user mariadbd runs as) reaches the socket.
MARIADB_SOCKET=$RUN/mariadb/mariadb.sock
SLURM_CONF=$ETC/slurm.conf
((${#MUNGE_SOCKET} < 100)) || die_early "DIR is too long: the munge socket path must stay under 100 characters"

# Only one start.sh at a time per DIR (the lock is not inherited by the daemons).
exec 9>"$DIR/.lock"
flock -n 9 || die_early "another start.sh is running on $DIR"

# ------------------------------------------------ refuse a running instance
# A daemon counts as ours when its environment carries TEAMSHARE_CLUSTER_DIR=$DIR (set below for
# everything this script starts), so a recycled pid never makes us refuse or, in stop.sh, kill.
proc_alive() { # pid: exists and is not a zombie
    local line
    [[ -r /proc/$1/stat ]] || return 1
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    line=${line##*) }
    [[ ${line%% *} != Z ]]
}
proc_is_ours() { # pid
    local env
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$1/environ") || return 1
    [[ $'\n'$env$'\n' == *$'\n'"TEAMSHARE_CLUSTER_DIR=$DIR"$'\n'* ]]
}
if [[ -d $DIR/pids ]]; then
    running=()
    for pf in "$DIR"/pids/*.pid; do
        [[ -f $pf ]] || continue
        pid=$(<"$pf")
        if [[ $pid =~ ^[0-9]+$ ]] && proc_alive "$pid" && proc_is_ours "$pid"; then
            running+=("$(basename "$pf" .pid)=$pid")
        fi
    done
    if ((${#running[@]})); then
        die_early "$DIR already holds a running cluster (${running[*]}); stop it first: $SCRIPT_DIR/stop.sh $DIR"
    fi
fi

# ------------------------------------------------------- refuse busy ports
port_listening() { # port: something listens on it (any address, IPv4 or IPv6)
    local hex files=() f
    hex=$(printf '%04X' "$1")
    for f in /proc/net/tcp /proc/net/tcp6; do [[ -r $f ]] && files+=("$f"); done
    ((${#files[@]})) || return 1
    awk -v p=":$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                      END { exit found ? 0 : 1 }' "${files[@]}"
}
declare -A PORT_OWNER=()
add_port() {
    [[ $2 -ge 1 && $2 -le 65535 ]] || die_early "$1 port $2 out of range"
    [[ -z ${PORT_OWNER[$2]:-} ]] || die_early "port $2 is configured twice (${PORT_OWNER[$2]} and $1)"
    PORT_OWNER[$2]=$1
}
add_port mariadb "$MARIADB_PORT"
add_port slurmdbd "$SLURMDBD_PORT"
add_port slurmctld "$SLURMCTLD_PORT"
for ((i = 1; i <= NODES; i++)); do add_port "slurmd-n$i" $((SLURMD_PORT_BASE + i - 1)); done
busy=()
for p in $(printf '%s\n' "${!PORT_OWNER[@]}" | sort -n); do
    if port_listening "$p"; then busy+=("$p (${PORT_OWNER[$p]})"); fi
done
if ((${#busy[@]})); then
    die_early "port(s) already in use: ${busy[*]}; choose others with SLURMCTLD_PORT, SLURMDBD_PORT, MARIADB_PORT, SLURMD_PORT_BASE"
fi

# Keep the ports out of the kernel's ephemeral range. They lie inside it (32768-60999 on
# Debian), so an outgoing connection of a daemon already started (slurmctld to a slurmd,
# slurmdbd to MariaDB) may take one as its source port in the moment before its own daemon binds
# it: slurmd-n16 failed so once ("Unable to bind listen port (57016): Address already in use").
# As root, the ports join net.ipv4.ip_local_reserved_ports, which keeps the kernel from choosing
# them as source ports and changes nothing else (a listener binds them as before); they stay
# reserved until the machine restarts (clusters side by side share them). Best effort: a write
# of another cluster's start at the same moment can drop ours (checked and written again).
reserve_ports() {
    local f=/proc/sys/net/ipv4/ip_local_reserved_ports try missing
    [[ -w $f ]] && command -v python3 >/dev/null || return 0
    for try in 1 2 3 4 5; do
        # The cluster's ports that no span of the list holds yet, comma-separated.
        missing=$(python3 - "$f" "${!PORT_OWNER[@]}" <<'EOF'
import sys
spans = [s.split("-") for s in open(sys.argv[1]).read().strip().split(",") if s]
held = lambda p: any(int(s[0]) <= p <= int(s[-1]) for s in spans)
print(",".join(a for a in sys.argv[2:] if not held(int(a))))
EOF
        ) || return 0
        [[ -n $missing ]] || return 0
        local have
        have=$(<"$f")
        echo "${have:+$have,}$missing" >"$f" 2>/dev/null || return 0
        sleep 0.$((RANDOM % 3 + 1))
    done
}
reserve_ports

# ------------------------------------------------------------------ packages
ensure_packages() {
    local -A need=()
    local b pkg
    local -A bin_pkg=(
        [munged]=munge [mungekey]=munge [munge]=munge [unmunge]=munge
        [mariadbd]=mariadb-server [mariadb-install-db]=mariadb-server
        [mariadb-admin]=mariadb-client [mariadb]=mariadb-client
        [slurmdbd]=slurmdbd [slurmctld]=slurmctld [slurmd]=slurmd
        [sacctmgr]=slurm-client [scontrol]=slurm-client [sinfo]=slurm-client [sbatch]=slurm-client
        [flock]=util-linux [setsid]=util-linux
    )
    for b in "${!bin_pkg[@]}"; do
        command -v "$b" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$b" >/dev/null 2>&1 ||
            need[${bin_pkg[$b]}]=1
    done
    for pkg in slurm-wlm-basic-plugins slurm-wlm-mysql-plugin; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need[$pkg]=1
    done
    ((${#need[@]})) || return 0
    [[ $SKIP_APT != 1 ]] || die_early "missing packages (SKIP_APT=1): ${!need[*]}"
    say "installing missing packages: ${!need[*]}"
    local created_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then # keep package scripts from starting system daemons
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -q &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${!need[@]}"
    } >"$DIR/apt.log" 2>&1 || rc=$?
    if ((created_policy)); then rm -f /usr/sbin/policy-rc.d; fi
    if ((rc)); then
        tail -n 20 "$DIR/apt.log" >&2
        die_early "apt-get install ${!need[*]} failed (full output: $DIR/apt.log)"
    fi
}
ensure_packages
export PATH=$PATH:/usr/sbin:/sbin
if dpkg -s slurm-wlm-emulator >/dev/null 2>&1; then
    say "WARNING: slurm-wlm-emulator is installed; it is known to be broken and takes over slurmctld"
fi

find_plugin_dir() {
    local d
    if [[ -n ${SLURM_PLUGIN_DIR:-} ]]; then echo "$SLURM_PLUGIN_DIR"; return; fi
    for d in /usr/lib/*/slurm-wlm /usr/lib64/slurm /usr/lib/slurm /usr/local/lib/slurm; do
        if [[ -f $d/auth_munge.so ]]; then echo "$d"; return; fi
    done
    return 1
}
SYS_PLUGIN_DIR=$(find_plugin_dir) || die_early "cannot find Slurm's plugin directory (set SLURM_PLUGIN_DIR)"
[[ -f $SYS_PLUGIN_DIR/accounting_storage_mysql.so ]] ||
    die_early "$SYS_PLUGIN_DIR/accounting_storage_mysql.so missing (package slurm-wlm-mysql-plugin)"

# --------------------------------------------------------- failure handling
STEP="prepare"
STEP_LOGS=()
STARTED=0
step() { STEP=$1; shift; STEP_LOGS=("$@"); say "$STEP"; }
fail() {
    trap - ERR INT TERM
    echo >&2
    echo "start.sh: FAILED at step '$STEP' after $(elapsed)s: $*" >&2
    local f shown=0
    for f in "${STEP_LOGS[@]}"; do
        # A daemon's .out (its stdout/stderr) repeats its .log; it matters when the .log is empty.
        if [[ $f == *.out ]] && ((shown)); then continue; fi
        if [[ -s $f ]]; then
            echo "---- last lines of $f:" >&2
            tail -n 25 "$f" >&2
            shown=1
            if [[ $(tail -n 25 "$f") == *"Address already in use"* ]]; then
                echo "---- hint: another process took one of this cluster's ports after the start-up check:" \
                    "$(printf '%s\n' "${!PORT_OWNER[@]}" | sort -n | tr '\n' ' ')" >&2
            fi
        fi
    done
    if ((STARTED)); then
        echo "---- stopping what was started (logs stay in $LOG/)" >&2
        "$SCRIPT_DIR/stop.sh" "$DIR" >&2 || true
    fi
    echo "start.sh: logs: $LOG/" >&2
    exit 1
}
trap 'fail "command failed (line $LINENO, exit $?)"' ERR
trap 'fail "interrupted"' INT TERM

# --------------------------------------------- fresh state (logs are kept)
step "preparing $DIR"
for sub in etc run pids state db dev plugins tmp env; do rm -rf -- "${DIR:?}/$sub"; done
mkdir -p "$LOG"
# Rotate the previous instance's logs into log/prev/ (one generation).
shopt -s nullglob
old_logs=("$LOG"/*.log "$LOG"/*.out)
shopt -u nullglob
if ((${#old_logs[@]})); then
    rm -rf "$LOG/prev"
    mkdir -p "$LOG/prev"
    mv -- "${old_logs[@]}" "$LOG/prev/"
fi
mkdir -p "$ETC" "$RUN/munge" "$RUN/mariadb" "$PIDS" "$STATE/ctld" "$DB" "$DIR/tmp" "$DIR/plugins"
chmod 755 "$DIR" "$RUN" "$RUN/munge"
chmod 700 "$RUN/mariadb"
chmod 1777 "$DIR/tmp"
export TEAMSHARE_CLUSTER_DIR=$DIR
export SLURM_CONF

HOST=$(hostname -s)
[[ -n $HOST ]] || fail "hostname -s is empty"

# Fake GPUs: one device directory per node, each with its own nvidia0..N-1 (char 1,3 = /dev/null).
for ((i = 1; i <= NODES; i++)); do
    mkdir -p "$DIR/dev/n$i" "$STATE/slurmd/n$i"
    for ((g = 0; g < $(node_gpus "$i"); g++)); do
        if ! mknod "$DIR/dev/n$i/nvidia$g" c 1 3 2>/dev/null; then
            # mknod can be forbidden in some containers. slurmd then logs "not a valid character
            # or block device" for a plain file but still counts and hands it out.
            if ((i == 1 && g == 0)); then say "WARNING: mknod not permitted here: fake GPUs are plain files"; fi
            : >"$DIR/dev/n$i/nvidia$g"
        fi
    done
done
gpu_files() { # node index, first device, count
    if (($3 == 1)); then echo "$DIR/dev/n$1/nvidia$2"; else echo "$DIR/dev/n$1/nvidia[$2-$(($2 + $3 - 1))]"; fi
}
# Node i's Gres= value: its GPUs by type, then its shards.
node_gres_conf() {
    local t n out=
    while read -r t n; do
        if [[ $t == - ]]; then out+="${out:+,}gpu:$n"; else out+="${out:+,}gpu:$t:$n"; fi
    done < <(node_gres "$1")
    (($(node_shards "$1") == 0)) || out+=",shard:$(($(node_shards "$1") * $(node_gpus "$1")))"
    echo "$out"
}
any_shards() { local i; for ((i = 1; i <= NODES; i++)); do (($(node_shards "$i") == 0)) || return 0; done; return 1; }
if ((NODES == 1)); then NODELIST=n1; else NODELIST="n[1-$NODES]"; fi

# --------------------------------------------------------- teamshare bits
TS_TOML=""
if [[ -n ${TEAMSHARE_CONFIG:-} ]]; then
    cp -- "$TEAMSHARE_CONFIG" "$ETC/teamshare.toml"
    TS_TOML=$ETC/teamshare.toml
    toml_cluster=$(python3 -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb")).get("cluster", {}).get("name", ""))' "$TS_TOML" 2>/dev/null) || toml_cluster=""
    if [[ -n $toml_cluster && $toml_cluster != "$CLUSTER_NAME" ]]; then
        say "WARNING: teamshare.toml says [cluster] name = \"$toml_cluster\" but CLUSTER_NAME=$CLUSTER_NAME"
    fi
fi
if [[ -n ${TEAMSHARE_PLUGIN:-} ]]; then
    cp -- "$TEAMSHARE_PLUGIN" "$DIR/plugins/job_submit_teamshare.so"
fi
# Slurm loads a plugin from the first directory of PluginDir that has it: the cluster's own first,
# so that a job_submit_teamshare.so installed in the system directory (the teamshare-plugin
# package) never replaces the build this cluster was given. Without TEAMSHARE_PLUGIN, the
# installed one is what JobSubmitPlugins=teamshare loads.
PLUGIN_DIR_LINE="PluginDir=$DIR/plugins:$SYS_PLUGIN_DIR"
if [[ -n ${JOB_SUBMIT_PLUGINS+set} ]]; then
    JSP=$JOB_SUBMIT_PLUGINS
elif [[ -n ${TEAMSHARE_PLUGIN:-} ]]; then
    JSP=teamshare
else
    JSP=none
fi
[[ $JSP =~ ^[A-Za-z0-9_/,-]*$ ]] || fail "JOB_SUBMIT_PLUGINS has odd characters: '$JSP'"
[[ -n $JSP ]] || JSP=none
if [[ ,$JSP, == *,teamshare,* || ,$JSP, == *,job_submit/teamshare,* ]]; then
    [[ -f $DIR/plugins/job_submit_teamshare.so || -f $SYS_PLUGIN_DIR/job_submit_teamshare.so ]] ||
        fail "JobSubmitPlugins includes teamshare but TEAMSHARE_PLUGIN (path to libjob_submit_teamshare.so) is not set and $SYS_PLUGIN_DIR has no job_submit_teamshare.so (package teamshare-plugin)"
fi
if [[ ,$JSP, == *,lua,* || ,$JSP, == *,job_submit/lua,* ]]; then
    if [[ -n ${JOB_SUBMIT_LUA:-} ]]; then
        cp -- "$JOB_SUBMIT_LUA" "$ETC/job_submit.lua"
    else
        cat >"$ETC/job_submit.lua" <<'EOF'
-- pass-through job_submit.lua (a baseline for comparisons)
function slurm_job_submit(job_desc, part_list, submit_uid)
    return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
return slurm.SUCCESS
EOF
    fi
fi

# ---------------------------------------------------------------- configs
step "writing configuration ($SLURM_CONF)"
DB_PASS=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
{
    cat <<EOF
# Generated by contrib/cluster/start.sh for a throwaway loopback cluster. Do not edit: regenerated
# on every start. Extra lines: SLURM_CONF_EXTRA=<file>.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$SLURMCTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
$PLUGIN_DIR_LINE
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=30
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=60
SlurmdTimeout=120
# Scheduling: batch_sched_delay=0 lets slurmctld's once-a-second background loop schedule new
# batch jobs at once (default: at most every 3 s); sched_interval=2 is the full-queue pass.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu$(any_shards && echo ,shard)
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5,bf_continue,bf_resolution=60,batch_sched_delay=0,partition_job_depth=$PARTITION_JOB_DEPTH$BF_YIELD
PriorityType=priority/multifactor
PriorityCalcPeriod=1
PriorityDecayHalfLife=7-0
PriorityMaxAge=1-0
PriorityWeightQOS=10000
PriorityWeightFairshare=1000
PriorityWeightAge=100
PriorityWeightJobSize=0
PriorityWeightPartition=0
PreemptType=preempt/qos
PreemptMode=REQUEUE
JobRequeue=1
# Accounting through our own slurmdbd; clients find its munge socket in AccountingStoragePass.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$SLURMDBD_PORT
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu$(for t in $(for ((i = 1; i <= NODES; i++)); do node_type "$i"; done | sort -u); do printf ',gres/gpu:%s' "$t"; done)$(any_shards && echo ,gres/shard)
EOF
    if [[ $JSP != none ]]; then echo "JobSubmitPlugins=$JSP"; fi
    cat <<EOF
# Nodes: one slurmd per node on this host; CPUs/memory overcommitted via config_overrides.
SlurmdParameters=config_overrides
EOF
    for ((i = 1; i <= NODES; i++)); do
        echo "NodeName=n$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + i - 1)) CPUs=$CPUS_PER_NODE RealMemory=$NODE_MEMORY_MB Gres=$(node_gres_conf "$i") State=UNKNOWN"
    done
    echo "PartitionName=gpu Nodes=$NODELIST Default=YES MaxTime=INFINITE State=UP"
    if [[ -n ${SLURM_CONF_EXTRA:-} ]]; then
        echo "# ---- appended from $SLURM_CONF_EXTRA"
        cat -- "$SLURM_CONF_EXTRA"
    fi
} >"$SLURM_CONF"

{
    echo "AutoDetect=off"
    for ((i = 1; i <= NODES; i++)); do
        first=0
        while read -r t n; do
            t=${t#-}
            echo "NodeName=n$i Name=gpu${t:+ Type=$t} File=$(gpu_files "$i" "$first" "$n")"
            first=$((first + n))
        done < <(node_gres "$i")
        # Shards spread evenly over the node's GPUs (no File=: Slurm shares them out).
        (($(node_shards "$i") == 0)) || echo "NodeName=n$i Name=shard Count=$(($(node_shards "$i") * $(node_gpus "$i")))"
    done
} >"$ETC/gres.conf"

# Catch syntax errors at once (clients parse slurm.conf before doing anything else).
if ! hosts=$(scontrol show hostnames "$NODELIST" 2>&1) || [[ $(wc -l <<<"$hosts") -ne $NODES ]]; then
    echo "$hosts" >&2
    fail "$SLURM_CONF does not parse (check SLURM_CONF_EXTRA=${SLURM_CONF_EXTRA:-})"
fi

cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$SLURMDBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
PluginDir=$SYS_PLUGIN_DIR
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MARIADB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
chmod 600 "$ETC/slurmdbd.conf"

cat >"$DIR/env" <<EOF
# source me: . $DIR/env   (Slurm clients then talk to this cluster; PATH is left alone)
export SLURM_CONF=$SLURM_CONF
EOF

# The daemons inherit this environment: make it describe this cluster only. The plugin reads
# TEAMSHARE_CONFIG before looking beside slurm.conf, so point it at our copy (or drop it), and
# drop the caller's SLURM_* variables (a start.sh run inside a Slurm job would leak its job's).
if [[ -n $TS_TOML ]]; then export TEAMSHARE_CONFIG=$TS_TOML; else unset TEAMSHARE_CONFIG; fi
if [[ -f $DIR/plugins/job_submit_teamshare.so ]]; then
    export TEAMSHARE_PLUGIN=$DIR/plugins/job_submit_teamshare.so
fi
for v in $(compgen -e); do
    if [[ $v == SLURM_* && $v != SLURM_CONF ]]; then unset "$v"; fi
done

# ----------------------------------------------------------------- helpers
launch() { # name cmd... : start in its own session, record its pid
    local name=$1
    shift
    # The subshell execs setsid, which execs the daemon: $! is the daemon's pid. Its cwd is $RUN.
    (cd "$RUN" && exec setsid "$@") </dev/null >>"$LOG/$name.out" 2>&1 9>&- &
    local pid=$!
    echo "$pid" >"$PIDS/$name.pid"
    STARTED=1
}
check_alive() { # name
    local pid
    pid=$(<"$PIDS/$1.pid")
    proc_alive "$pid" || fail "$1 (pid $pid) exited"
}
wait_until() { # description timeout_s daemon-name-or-"" cmd... : poll (quiet cmd) every 50-200 ms
    local desc=$1 timeout=$2 daemon=$3
    shift 3
    local deadline=$(($(now_us) + timeout * 1000000)) delay=0.05
    until "$@"; do
        if [[ -n $daemon ]]; then check_alive "$daemon"; fi
        if (($(now_us) > deadline)); then fail "$desc: not ready after ${timeout}s"; fi
        sleep "$delay"
        delay=0.2
    done
}
munge_ok() { munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }
mariadb_ok() { mariadb-admin --no-defaults --socket="$MARIADB_SOCKET" -uroot --connect-timeout=2 ping >/dev/null 2>&1; }
# Clients are wrapped in timeout: a foreign listener on our port would make them wait MessageTimeout.
ctld_ok() { [[ $(timeout 2 scontrol ping 2>/dev/null) == *"is UP"* ]]; }
nodes_idle() {
    local out n=0 line
    out=$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
    while read -r line; do [[ ${line#* } == idle ]] && n=$((n + 1)); done < <(sort -u <<<"$out")
    ((n >= NODES))
}

# -------------------------------------------------------------------- munge
step "starting munged" "$LOG/munged.log" "$LOG/munged.out"
mungekey --create --keyfile="$ETC/munge.key" >/dev/null 2>"$LOG/mungekey.out"
chmod 600 "$ETC/munge.key"
launch munged munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$ETC/munge.key" \
    --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" --seed-file="$STATE/munged.seed"
wait_until "munged" "$READY_TIMEOUT" munged munge_ok

# ------------------------------------------------------------------ mariadb
step "initialising MariaDB in $DB" "$LOG/mariadb-install.log"
# Throwaway data: no durability (nosync, no doublewrite, lazy log flush). The sizes are the ones
# slurmdbd checks for (below them it logs "Database settings not recommended values").
MARIADB_OPTS=(--innodb-log-file-size=64M --innodb-buffer-pool-size=1G --innodb-doublewrite=0
    --innodb-flush-method=nosync --innodb-flush-log-at-trx-commit=0 --skip-log-bin
    --skip-name-resolve --tmpdir="$DIR/tmp")
# MariaDB's root is the OS root only, through the socket (unix_socket): with the `normal` method
# mariadb-install-db also made root@127.0.0.1, root@::1 and root@<host> without a password, and
# any local user could take the accounting database over TCP. slurmdbd has its own user
# (below), with a generated password kept in the 0600 slurmdbd.conf.
mariadb-install-db --no-defaults --datadir="$DB" --user=root --auth-root-authentication-method=socket \
    --auth-root-socket-user=root --skip-test-db "${MARIADB_OPTS[@]}" >"$LOG/mariadb-install.log" 2>&1 ||
    fail "mariadb-install-db failed"

step "starting mariadbd (port $MARIADB_PORT)" "$LOG/mariadb.log" "$LOG/mariadbd.out"
launch mariadbd mariadbd --no-defaults --user=root --datadir="$DB" --socket="$MARIADB_SOCKET" \
    --port="$MARIADB_PORT" --bind-address=127.0.0.1 --pid-file="$RUN/mariadbd.pid" \
    --log-error="$LOG/mariadb.log" --innodb-lock-wait-timeout=900 --max-connections=200 \
    "${MARIADB_OPTS[@]}"
wait_until "mariadbd" "$READY_TIMEOUT" mariadbd mariadb_ok
mariadb --no-defaults --socket="$MARIADB_SOCKET" -uroot >>"$LOG/mariadb-install.log" 2>&1 <<EOF ||
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
    fail "cannot create the MariaDB user 'slurm'@'127.0.0.1' (see $LOG/mariadb-install.log)"

# ----------------------------------------------------------------- slurmdbd
# The database exists before slurmdbd starts (above): slurmdbd 24.11/26.05 with their MariaDB
# client library die on the first start otherwise (error 5027 on a reused connection handle).
step "starting slurmdbd (port $SLURMDBD_PORT)" "$LOG/slurmdbd.log" "$LOG/slurmdbd.out"
launch slurmdbd slurmdbd -D
wait_until "slurmdbd listening on $SLURMDBD_PORT" "$READY_TIMEOUT" slurmdbd port_listening "$SLURMDBD_PORT"

step "registering cluster $CLUSTER_NAME" "$LOG/sacctmgr.log" "$LOG/slurmdbd.log"
add_cluster() {
    local out rc=0
    out=$(timeout 5 sacctmgr -i add cluster "$CLUSTER_NAME" 2>&1) || rc=$?
    printf '%s\n' "$out" >>"$LOG/sacctmgr.log"
    if [[ $out == *"fatal:"* ]]; then fail "sacctmgr: $out"; fi
    return "$rc"
}
wait_until "sacctmgr add cluster $CLUSTER_NAME" "$READY_TIMEOUT" slurmdbd add_cluster

# ---------------------------------------------------------------- slurmctld
step "starting slurmctld (port $SLURMCTLD_PORT)" "$LOG/slurmctld.log" "$LOG/slurmctld.out"
launch slurmctld slurmctld -D
wait_until "slurmctld" "$READY_TIMEOUT" slurmctld ctld_ok

# ------------------------------------------------------------------- slurmd
step "starting $NODES slurmd (ports $SLURMD_PORT_BASE-$((SLURMD_PORT_BASE + NODES - 1)), $(for ((i = 1; i <= NODES; i++)); do node_gpus "$i"; done | paste -sd/) GPUs)" \
    "$LOG/slurmctld.log" "$LOG/slurmd-n1.log" "$LOG/slurmd-n1.out"
for ((i = 1; i <= NODES; i++)); do launch "slurmd-n$i" slurmd -D -N "n$i"; done
deadline=$(($(now_us) + READY_TIMEOUT * 1000000))
until nodes_idle; do
    for ((i = 1; i <= NODES; i++)); do
        pid=$(<"$PIDS/slurmd-n$i.pid")
        if ! proc_alive "$pid"; then
            STEP_LOGS=("$LOG/slurmd-n$i.log" "$LOG/slurmd-n$i.out")
            fail "slurmd-n$i (pid $pid) exited"
        fi
    done
    check_alive slurmctld
    if (($(now_us) > deadline)); then
        echo "sinfo now:" >&2
        sinfo -N -o '%N %T %E' >&2 || true
        fail "not all $NODES nodes idle after ${READY_TIMEOUT}s"
    fi
    sleep 0.1
done

# ----------------------------------------------------------------- accounts
team_names() { # teamshare.toml -> one [[team]] name per line
    python3 - "$1" 2>/dev/null <<'EOF' && return 0
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    data = tomllib.load(f)
for team in data.get("team", []):
    print(team["name"])
EOF
    # Fallback without tomllib: name = "x" lines inside [[team]] tables.
    awk -v q="'" '/^[[:space:]]*\[/ { in_team = ($0 ~ /^[[:space:]]*\[\[[[:space:]]*team[[:space:]]*\]\]/) }
         in_team && /^[[:space:]]*name[[:space:]]*=/ {
             v = $0; sub(/^[^=]*=[[:space:]]*/, "", v); sub(/[[:space:]]*(#.*)?$/, "", v)
             gsub(/^"|"$/, "", v); gsub("^" q "|" q "$", "", v); print v }' "$1"
}
ACCOUNTS=()
if [[ -n $TS_TOML && -n ${ACCOUNTD:-} ]]; then
    step "creating accounts/QOS with accountd setup-slurm" "$LOG/accountd-setup.log"
    rc=0
    user_args=()
    for u in ${CLUSTER_USERS:-root}; do user_args+=(--user "$u"); done
    "$ACCOUNTD" --config "$TS_TOML" setup-slurm "${user_args[@]}" >"$LOG/accountd-setup.log" 2>&1 || rc=$?
    ((rc == 0)) || fail "$ACCOUNTD --config $TS_TOML setup-slurm ${user_args[*]} failed (exit $rc)"
    mapfile -t ACCOUNTS < <(team_names "$TS_TOML")
elif [[ -n $TS_TOML ]]; then
    mapfile -t ACCOUNTS < <(team_names "$TS_TOML")
    step "creating accounts from teamshare.toml teams: ${ACCOUNTS[*]:-(none)}" "$LOG/sacctmgr.log"
    for a in "${ACCOUNTS[@]}"; do
        [[ $a =~ ^[A-Za-z0-9_.-]+$ ]] || fail "team name '$a' is not a valid Slurm account name"
    done
    if ((${#ACCOUNTS[@]})); then
        acct_list=$(IFS=,; echo "${ACCOUNTS[*]}")
        sacctmgr -i add account "$acct_list" Cluster="$CLUSTER_NAME" Description=teamshare-team \
            Organization=teamshare >>"$LOG/sacctmgr.log" 2>&1 || fail "sacctmgr add account failed"
        sacctmgr -i add user root Account="$acct_list" Cluster="$CLUSTER_NAME" \
            >>"$LOG/sacctmgr.log" 2>&1 || fail "sacctmgr add user root failed"
    fi
fi

# -------------------------------------------------------------- final check
step "final check (nodes idle, sacctmgr reachable)" "$LOG/slurmctld.log" "$LOG/slurmdbd.log"
nodes_idle || fail "nodes are no longer idle"
clusters=$(sacctmgr -n -P show cluster format=cluster 2>>"$LOG/sacctmgr.log") || fail "sacctmgr cannot reach slurmdbd"
[[ $'\n'$clusters$'\n' == *$'\n'"$CLUSTER_NAME"$'\n'* ]] || fail "cluster $CLUSTER_NAME not registered in slurmdbd"
if [[ $SMOKE_TEST == 1 ]]; then
    step "smoke test: sbatch --gres=gpu:1 --wait" "$LOG/slurmctld.log" "$LOG/slurmd-n1.log"
    acct_opt=()
    if ((${#ACCOUNTS[@]})); then acct_opt=(-A "${ACCOUNTS[0]}"); fi
    # shellcheck disable=SC2016 # expanded by the job's shell
    timeout "$READY_TIMEOUT" sbatch --wait -Q "${acct_opt[@]}" -p gpu --gres=gpu:1 -o /dev/null -J smoke \
        --wrap 'test -n "$CUDA_VISIBLE_DEVICES"' || fail "smoke-test job failed"
fi

trap - ERR INT TERM
say "ready: cluster '$CLUSTER_NAME', $NODES nodes ($(for ((i = 1; i <= NODES; i++)); do node_gres_conf "$i"; done | paste -sd' ')), partition gpu, JobSubmitPlugins=$JSP"
if ((${#ACCOUNTS[@]})); then echo "  accounts (user root is in each): ${ACCOUNTS[*]}"; fi
cat <<EOF

  Use it:    . $DIR/env          (exports SLURM_CONF=$SLURM_CONF)
             sinfo; sbatch ${ACCOUNTS[0]:+-A ${ACCOUNTS[0]} }-p gpu --gres=gpu:1 --wrap 'echo \$CUDA_VISIBLE_DEVICES'; sacct
  Logs:      $LOG/   (slurmctld.log, slurmd-nX.log, slurmdbd.log, mariadb.log, munged.log)
  Stop:      $SCRIPT_DIR/stop.sh $DIR   (--purge: also delete everything but log/)

started in $(elapsed) s
EOF
