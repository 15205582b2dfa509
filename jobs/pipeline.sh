#!/bin/bash
# Submit partitioning, then training that starts only if partitioning succeeded (--dependency=afterok).
#   jobs/pipeline.sh DATASET ROOT PARTS_DIR NUM_PARTS [cpu|cuda|xpu] [extra mpignn.train args...]
# NUM_PARTS must equal the training job's ranks (its --nodes x --ntasks-per-node).
set -euo pipefail
dataset=$1 root=$2 parts=$3 num_parts=$4 kind=${5:-cpu}
shift $(( $# < 5 ? $# : 5 ))
mkdir -p logs
jid=$(sbatch --parsable jobs/partition.sbatch --dataset "$dataset" --root "$root" --num-parts "$num_parts" \
      --out "$parts")
echo "partition job $jid"
sbatch --dependency=afterok:"$jid" "jobs/$kind.sbatch" --dataset "$dataset" --root "$root" --partitions "$parts" "$@"
