#!/usr/bin/env bash
# Stop a cluster started by start.sh DIR.
#
#   contrib/cluster/stop.sh [--purge | --purge-all] DIR
#
# Stops exactly the processes recorded in DIR/pids (slurmd's, then slurmctld, slurmdbd, mariadbd,
# munged): SIGTERM, wait up to STOP_TIMEOUT seconds (default 20), then SIGKILL. A pid counts only
# while its process carries TEAMSHARE_CLUSTER_DIR=DIR in its environment (so a recycled pid is never
# signalled). Job steps left behind by the slurmd's (slurmstepd and its children) are killed too.
# Idempotent. DIR/log/ is kept; --purge removes everything else in DIR, --purge-all removes DIR.
set -Eeuo pipefail

usage() { sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
PURGE=0
ARGS=()
for a in "$@"; do
    case $a in
        --purge) PURGE=1 ;;
        --purge-all) PURGE=2 ;;
        -h | --help) usage; exit 0 ;;
        -*) usage >&2; exit 2 ;;
        *) ARGS+=("$a") ;;
    esac
done
[[ ${#ARGS[@]} -eq 1 ]] || { usage >&2; exit 2; }
STOP_TIMEOUT=${STOP_TIMEOUT:-20}
[[ $STOP_TIMEOUT =~ ^[0-9]+$ ]] || { echo "stop.sh: STOP_TIMEOUT must be an integer" >&2; exit 2; }

T0=${EPOCHREALTIME/./}
now_us() { echo "${EPOCHREALTIME/./}"; }
elapsed() { local d=$(( $(now_us) - T0 )); printf '%d.%02d' $((d / 1000000)) $(( (d % 1000000) / 10000 )); }

if [[ ! -d ${ARGS[0]} ]]; then
    echo "stop.sh: ${ARGS[0]} does not exist: nothing to stop"
    exit 0
fi
DIR=$(cd -- "${ARGS[0]}" && pwd -P)
MARKER=$DIR/.teamshare-cluster
if [[ ! -e $MARKER ]]; then
    echo "stop.sh: $DIR was not created by start.sh (no .teamshare-cluster): refusing to touch it" >&2
    exit 1
fi

proc_alive() { # pid: exists and is not a zombie
    local line
    [[ -r /proc/$1/stat ]] || return 1
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    line=${line##*) }
    [[ ${line%% *} != Z ]]
}
proc_is_ours() { # pid: carries this cluster's marker in its environment
    local env
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$1/environ") || return 1
    [[ $'\n'$env$'\n' == *$'\n'"TEAMSHARE_CLUSTER_DIR=$DIR"$'\n'* ]]
}

# stop_group name... : SIGTERM all of them at once, wait, SIGKILL stragglers; remove pid files.
stop_group() {
    local name pf pid names=() pids=()
    for name in "$@"; do
        pf=$DIR/pids/$name.pid
        [[ -f $pf ]] || continue
        pid=$(<"$pf")
        if [[ $pid =~ ^[0-9]+$ ]] && proc_alive "$pid"; then
            if proc_is_ours "$pid"; then
                names+=("$name")
                pids+=("$pid")
                continue
            fi
            echo "  $name: pid $pid is not ours any more (stale pid file), not signalled"
        fi
        rm -f "$pf"
    done
    ((${#pids[@]})) || return 0
    local t_start
    t_start=$(now_us)
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$(($(now_us) + STOP_TIMEOUT * 1000000)) left killed=0 i
    while :; do
        left=0
        for pid in "${pids[@]}"; do if proc_alive "$pid"; then left=1; fi; done
        ((left)) || break
        if (($(now_us) > deadline)); then
            if ((killed)); then
                echo "stop.sh: WARNING: still alive after SIGKILL: ${pids[*]}" >&2
                break
            fi
            for i in "${!pids[@]}"; do
                if proc_alive "${pids[$i]}"; then
                    echo "  ${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${STOP_TIMEOUT}s: SIGKILL"
                    kill -KILL "${pids[$i]}" 2>/dev/null || true
                fi
            done
            killed=1
            deadline=$(($(now_us) + 5000000))
        fi
        sleep 0.05
    done
    local took=$(( $(now_us) - t_start ))
    for i in "${!names[@]}"; do
        printf '  stopped %s (pid %s) in %d.%02d s\n' "${names[$i]}" "${pids[$i]}" \
            $((took / 1000000)) $(( (took % 1000000) / 10000 ))
        rm -f "$DIR/pids/${names[$i]}.pid"
    done
}

# Job steps: slurmstepd processes of our slurmd's, plus all their descendants (the job's processes).
# slurmd does not stop them on SIGTERM. slurmstepd overwrites its environment (process title), so it
# is recognised by its open SlurmdLogFile, DIR/log/slurmd-<node>.log.
stepd_is_ours() { # pid
    local fd comm
    read -r comm 2>/dev/null <"/proc/$1/comm" || return 1
    [[ $comm == slurmstepd ]] || return 1
    [[ $(readlink "/proc/$1/exe" 2>/dev/null) == */slurmstepd* ]] || return 1
    for fd in /proc/"$1"/fd/*; do
        [[ $(readlink "$fd" 2>/dev/null) == "$DIR/log/slurmd-"* ]] && return 0
    done
    return 1
}
kill_steps() {
    local -A children=()
    local p ppid line stepds=() victims=() queue=()
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        read -r line 2>/dev/null <"/proc/$p/stat" || continue
        line=${line##*) }
        ppid=${line#* }
        ppid=${ppid%% *}
        children[$ppid]+=" $p"
        if stepd_is_ours "$p"; then
            stepds+=("$p")
        fi
    done
    ((${#stepds[@]})) || return 0
    queue=("${stepds[@]}")
    while ((${#queue[@]})); do
        p=${queue[0]}
        queue=("${queue[@]:1}")
        victims+=("$p")
        # shellcheck disable=SC2206 # word splitting of the child list is intended
        queue+=(${children[$p]:-})
    done
    echo "  killing ${#stepds[@]} slurmstepd and their job processes (${#victims[@]} processes)"
    kill -KILL "${victims[@]}" 2>/dev/null || true
    local deadline=$(($(now_us) + 5000000)) left
    while (($(now_us) < deadline)); do
        left=0
        for p in "${victims[@]}"; do if proc_alive "$p"; then left=1; fi; done
        ((left)) || break
        sleep 0.05
    done
}

echo "stop.sh: stopping the cluster in $DIR"
if [[ -d $DIR/pids ]]; then
    shopt -s nullglob
    known=" munged mariadbd slurmdbd slurmctld "
    slurmds=() others=()
    for pf in "$DIR"/pids/*.pid; do
        name=$(basename "$pf" .pid)
        case $name in
            slurmd-*) slurmds+=("$name") ;;
            *) if [[ $known != *" $name "* ]]; then others+=("$name"); fi ;;
        esac
    done
    shopt -u nullglob
    if ((${#others[@]})); then stop_group "${others[@]}"; fi
    if ((${#slurmds[@]})); then stop_group "${slurmds[@]}"; fi
    kill_steps
    stop_group slurmctld
    stop_group slurmdbd
    stop_group mariadbd
    stop_group munged
else
    kill_steps
fi

case $PURGE in
    1)
        find "$DIR" -mindepth 1 -maxdepth 1 ! -name log ! -name .teamshare-cluster -exec rm -rf -- {} +
        echo "stop.sh: purged $DIR (kept $DIR/log)"
        ;;
    2)
        rm -rf -- "$DIR"
        echo "stop.sh: removed $DIR"
        ;;
esac
echo "stop.sh: stopped in $(elapsed) s"
