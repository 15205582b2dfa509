# shellcheck shell=bash
# Sourced by every jobs/*.sbatch: site settings, environment, the job header, and the launcher.
# Site settings (modules, interfaces, oneCCL variables) live in jobs/site/<cluster>.env: MPIGNN_SITE=<cluster>.
# The Python environment: VENV=/path/to/venv (activated if set), else whatever `python` is on PATH.

cd "${SLURM_SUBMIT_DIR:-.}" || exit 1
if [ -n "${MPIGNN_SITE:-}" ]; then
  # shellcheck source=/dev/null
  source "jobs/site/${MPIGNN_SITE}.env"
fi
if [ -n "${VENV:-}" ]; then
  # shellcheck source=/dev/null
  source "${VENV}/bin/activate"
fi
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"

# malloc: preload MPIGNN_PRELOAD (default tcmalloc, as torch.backends.xeon.run_cpu's default; jemalloc with the
# settings torch's launcher gives it) where this host has it: flat memory at heap speed (docs/failures.md). A
# preload the site or you set (LD_PRELOAD) is kept; MPIGNN_PRELOAD=none preloads nothing (glibc, big blocks mapped). Each host's run log says which malloc its ranks
# ran ("malloc:"), and names the hosts where they differ (docs/failures.md, "Memory over long runs").
preload_malloc() {
  local name="${MPIGNN_PRELOAD:-tcmalloc}" lib="" dir
  [ -z "${LD_PRELOAD:-}" ] && [ "$name" != none ] || return 0
  case "$name" in
    jemalloc) lib=libjemalloc.so.2 ;;
    tcmalloc) lib=libtcmalloc_minimal.so.4 ;;
    mimalloc) lib=libmimalloc.so.2 ;;
    *) echo "MPIGNN_PRELOAD must be jemalloc, tcmalloc, mimalloc or none; got '$name'" >&2; return 2 ;;
  esac
  for dir in ${MPIGNN_LIB_DIRS:-${CONDA_PREFIX:+$CONDA_PREFIX/lib} /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib}; do
    if [ -e "$dir/$lib" ]; then
      export LD_PRELOAD="$dir/$lib"
      [ "$name" != jemalloc ] || export MALLOC_CONF="${MALLOC_CONF:-oversize_threshold:1,background_thread:true,metadata_thp:auto}"
      return 0
    fi
  done
}
preload_malloc
NP="${SLURM_NTASKS:?run this script with sbatch (SLURM_NTASKS is not set)}"

job_header() {
  echo "== job ${SLURM_JOB_ID:-?} (${SLURM_JOB_NAME:-?}) on ${SLURM_JOB_NUM_NODES:-1} hosts: ${SLURM_JOB_NODELIST:-$(hostname)}"
  echo "== ${NP} ranks, ${SLURM_NTASKS_PER_NODE:-?} per host, ${OMP_NUM_THREADS} threads each"
  echo "== mpignn commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), python $(command -v python)"
  echo "== MPI: $(python -m mpi4py --mpi-lib-version 2>/dev/null | head -n 1)"
  echo "== LD_PRELOAD: ${LD_PRELOAD:-none}"
}

# Slurm's --signal=USR2@T (no B:) signals the tasks of the job steps: with srun these are the ranks, which
# stop together, checkpoint and exit 75. A SIGUSR2 sent to Hydra's mpiexec (the mpich wheel's 5.0.2) kills it
# instead of reaching the ranks, and one sent to its hydra_pmi_proxy kills the proxy (mpiexec fails, the ranks
# never see it): tests/test_stopping.py. Under Slurm the proxies are what get the signal, so use srun where the
# run must checkpoint before the limit.
# launch CMD...: one launcher per job. MPIGNN_LAUNCHER=srun (default; the site MPI must be built with Slurm's
# PMI: set SRUN_MPI to pmix or pmi2) or mpiexec (the MPI that mpi4py was built against, e.g. the mpich wheel).
# srun binds each rank to its own cores (SRUN_CPU_BIND, default cores): unbound ranks migrate and share cores,
# measured here on a 200k-node graph: 2 ranks trained 4363 seeds/s bound to a core each, 4125 unbound.
# --kill-on-bad-exit=1: a rank that dies ends the step, so the ranks that survive it do not block waiting.
launch() {
  case "${MPIGNN_LAUNCHER:-srun}" in
    srun) srun --mpi="${SRUN_MPI:-pmix}" --ntasks="$NP" --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
            --cpu-bind="${SRUN_CPU_BIND:-cores}" --kill-on-bad-exit=1 "$@" ;;
    mpiexec) mpiexec -n "$NP" -ppn "${SLURM_NTASKS_PER_NODE%%(*}" "$@" ;;
    *) echo "MPIGNN_LAUNCHER must be srun or mpiexec; got '${MPIGNN_LAUNCHER}'" >&2; return 2 ;;
  esac
}
