"""`mpirun -np N python -m mpignn.train`. Flags are checked before torch is imported, so a typo fails in a second.
Exit codes: 0 done, 1 error, 2 usage, 75 stopped by SIGUSR2 or SIGTERM (with a checkpoint where --checkpoint-dir
is set), 130 Ctrl-C.
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["main", "cli"]


def main(argv: Sequence[str] | None = None, *, keep_handler: bool = False) -> int:
    """Train; return the exit code. The previous SIGUSR2 handler is put back unless `keep_handler`."""
    from mpignn.launch.allocator import prefer_huge_pages

    prefer_huge_pages()  # before torch's first allocation
    from mpignn.training.stopping import StopSignal

    # First: Slurm's warning can come while the data is still loading.
    stop = StopSignal().install()
    try:
        return _train(argv, stop)
    finally:
        if not keep_handler:
            stop.uninstall()


def _train(argv: Sequence[str] | None, stop: Any) -> int:
    from mpignn.config.train_config import TrainConfig, build_parser
    from mpignn.errors import ConfigError, DatasetError, mark_agreed

    ns = None
    try:
        ns = build_parser().parse_args(argv)
        cfg = TrainConfig.from_args(ns)  # the same flags fail the same way on every rank, before any collective
        from mpignn.data import check_known

        check_known(cfg.dataset)  # before torch is imported: a misspelt name fails in a second
        from mpignn.training.fit import check_flags
        from mpignn.tasks import make_task

        task = make_task(cfg)  # what differs between tasks, as one object the pipeline asks
        check_flags(cfg, task)
    except (ConfigError, DatasetError) as exc:
        if ns is not None and ns.config:  # each rank read its own copy of the file: unagreed, so with MPI up
            from mpignn.mpi import world  # run_main aborts the job instead of leaving the others waiting

            world()
            raise
        raise mark_agreed(exc) from None
    from mpignn.runtime.session import train_run

    return train_run(cfg, task, stop)


def cli() -> None:
    from mpignn.mpi.run import exit_process, run_main

    # The handler stays installed to the end, so a signal during the exit cannot kill a finished run.
    exit_process(run_main(main, keep_handler=True))


if __name__ == "__main__":
    cli()
