#!/bin/bash
# Submit partitioning, then training that starts only if partitioning succeeded (--dependency=afterok), then,
# with PREDICT_OUT=DIR, predictions for every node from the trained checkpoint (jobs/predict.sbatch).
#   [PREDICT_OUT=DIR] jobs/pipeline.sh DATASET ROOT PARTS_DIR NUM_PARTS [cpu|cuda|xpu] [extra mpignn.train args...]
# NUM_PARTS must equal the training job's ranks (its --nodes x --ntasks-per-node); PREDICT_OUT needs
# --checkpoint-dir DIR among the training args.
set -euo pipefail
dataset=$1 root=$2 parts=$3 num_parts=$4 kind=${5:-cpu}
shift $(( $# < 5 ? $# : 5 ))
checkpoint="" prev=""
for arg in "$@"; do
    if [[ $prev == --checkpoint-dir ]]; then checkpoint=$arg; fi
    prev=$arg
done
if [[ -n ${PREDICT_OUT:-} && -z $checkpoint ]]; then
    echo "pipeline.sh: PREDICT_OUT=$PREDICT_OUT expects --checkpoint-dir DIR among the training args; got none." \
         "HINT: add --checkpoint-dir DIR (the predict step reads the trained weights there)" >&2
    exit 2
fi
mkdir -p logs
jid=$(sbatch --parsable jobs/partition.sbatch --dataset "$dataset" --root "$root" --num-parts "$num_parts" \
      --out "$parts")
echo "partition job $jid"
tid=$(sbatch --parsable --dependency=afterok:"$jid" "jobs/$kind.sbatch" --dataset "$dataset" --root "$root" \
      --partitions "$parts" "$@")
echo "training job $tid"
if [[ -n ${PREDICT_OUT:-} ]]; then
    pid=$(sbatch --parsable --dependency=afterok:"$tid" jobs/predict.sbatch --checkpoint-dir "$checkpoint" \
          --out "$PREDICT_OUT" --root "$root" --partitions "$parts")
    echo "predict job $pid"
fi
