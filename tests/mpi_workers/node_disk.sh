#!/bin/sh
# node_disk.sh BASE MOUNT ORDER CMD...: run CMD with BASE/diskN bound over MOUNT, N being this host's entry of
# ORDER (host1 takes the first, host2 the second: "2,1" swaps the disks). Like multihost-mpirun -d, a folder no
# other host sees, but one that outlives the job, as node-local scratch does when a job is requeued.
base=$1 mount=$2 order=$3
shift 3
n=$(echo "$order" | cut -d, -f"$(hostname | sed 's/^host//')")
mkdir -p "$base/disk$n" "$mount"
exec unshare --mount sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$base/disk$n" "$mount" "$@"
