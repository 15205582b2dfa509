"""Checkpoint generations: ACTIONS run in order; save:E saves weights and rows set to E, crash:E dies right
after the rows file is written (before the model file), resume:E checks that E comes back, refuse expects a
refused resume (printed as one REFUSED line)."""
import os
import sys

import numpy as np
import torch

from cli_many import end

import mpignn.training.checkpoint as ckpt
import mpignn.exchange.embedding as embedding
from mpignn.errors import ConfigError
from mpignn.exchange.embedding import NodeEmbedding
from mpignn.mpi import run_main, world


def _objects(rank, value):
    model = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(model.weight, value), torch.nn.init.constant_(model.bias, value)
    rows = NodeEmbedding(5, 2, lo=5 * rank)
    rows.weight[...] = 10 * value + rank
    return model, torch.optim.SGD(model.parameters(), lr=0.1), rows


def main(folder, *actions):
    comm = world()
    for action in actions:
        name, _, value = action.partition(":")
        if name in ("save", "crash"):
            if name == "crash":
                real = embedding.write_durable

                def die_after_rows(final, write):
                    real(final, write)
                    os._exit(3)  # killed between the rows and the model: no cleanup runs
                embedding.write_durable = die_after_rows
            model, opt, rows = _objects(comm.rank, int(value))
            ckpt.save_state(comm, folder, epoch=int(value), step=0, model=model, optimizer=opt, device="cpu",
                            extra={}, rows=rows, keep=2)
        elif name == "resume":
            model, opt, rows = _objects(comm.rank, 0)
            info = ckpt.resume_state(comm, folder, model, opt, {}, "cpu", rows=rows)
            assert (info["epoch"], info["step"], info["same_world"]) == (int(value), 0, True), info
            assert torch.all(model.weight == int(value)) and np.all(rows.weight == 10 * int(value) + comm.rank)
        elif name == "refuse":
            model, opt, rows = _objects(comm.rank, 0)
            try:
                ckpt.resume_state(comm, folder, model, opt, {}, "cpu", rows=rows)
            except ConfigError as exc:
                print(f"REFUSED rank={comm.rank}: {exc}", flush=True)
            else:
                raise AssertionError("the resume was not refused")
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    end(run_main(main, *sys.argv[1:]))
