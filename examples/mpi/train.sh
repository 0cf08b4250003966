#!/bin/bash
# Open MPI: mpirun starts one rank per host, each runs `autodist run` and joins the job; none launches
# another (docs/kubernetes.md, "Jobs the platform starts").
#
#   examples/mpi/train.sh HOSTFILE                                        # the digits CNN, 12 epochs
#   examples/mpi/train.sh HOSTFILE examples/unmodified_train.py --steps 200   # any script and its arguments
#
# HOSTFILE lists the hosts, one per line (Open MPI's hostfile: "node1 slots=1"); the ranks go one per
# host, in its order. Rank 0, on the first host, is the chief: the others reach it at that host's
# name (AUTODIST_CHIEF_ADDRESS), and each tells it its own address at the start, the address of its
# interface that routes to the chief (no variable to set per host). Rank k's TensorFlow server
# listens on AUTODIST_PORT + k, the start-up exchange on AUTODIST_PORT + the number of hosts.
# mpirun ends every rank when one fails; run the same command again and the job resumes from the
# chief's CHECKPOINT_DIR at the step it holds (removed when the training ends well). Run it from a
# directory every host sees, with autodist on the PATH that -x PATH gives the ranks.
# MPIRUN_OPTIONS adds options to mpirun (e.g. --allow-run-as-root, --mca btl_tcp_if_include eth0).
set -eu
hostfile=${1:?usage: examples/mpi/train.sh HOSTFILE [SCRIPT ARGS...]}
shift
if [ "$#" -eq 0 ]; then
    set -- examples/digits_fit_plain.py --epochs 12
fi
hosts=$(awk 'NF && $1 !~ /^#/ {print $1}' "$hostfile")
chief=$(echo "$hosts" | head -n 1)
count=$(echo "$hosts" | wc -l)
CHECKPOINT_DIR=${CHECKPOINT_DIR:-$HOME/autodist-checkpoints/mpi-$(basename "$1" .py)}
# shellcheck disable=SC2086
exec mpirun ${MPIRUN_OPTIONS:-} --hostfile "$hostfile" -np "$count" --map-by node --bind-to none \
    -x PATH -x AUTODIST_CHIEF_ADDRESS="$chief" -x AUTODIST_PORT="${AUTODIST_PORT:-29400}" \
    autodist run --no-progress --checkpoint-dir "$CHECKPOINT_DIR" "$@"
