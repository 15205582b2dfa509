"""`python -m mpignn.bench.epoch`: one training epoch on one process, mpignn against PyG's NeighborLoader +
GraphSAGE, same graph, sizes, threads and device; PyG's sampler runs on the CPU, as PyG users run it.
mpignn's rows build batches on the host and on the device.
"""
from __future__ import annotations

import tempfile

from mpignn.bench._common import bench_parser, pyg_python, run_bench, run_reference, run_train, table
from mpignn.launch.device import cpu_lacks_bf16_units


def precisions(choice: str, device: str) -> tuple[list[str], str]:
    """Return (the precisions to time, a title note); auto skips bf16 on a CPU without bf16 units (emulated)."""
    if choice != "auto":
        return choice.split(","), ""
    if cpu_lacks_bf16_units(device):
        return ["fp32"], " (bf16 skipped: this CPU has no bf16 units; --precisions fp32,bf16 times it anyway)"
    return ["fp32", "bf16"], ""


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.epoch", __doc__,
                          dataset="synthetic:num_nodes=200000,avg_degree=20,num_features=100", fanout="15,10,5",
                          batch_size=1024, hidden=256, threads=2,
                          precisions=("auto", "comma-separated; auto: fp32,bf16 (fp32 alone on a CPU without bf16 "
                                              "units)"),
                          device=("cpu", "cpu, cuda or xpu: where both sides train"),
                          sample_on=("host,device", "where mpignn builds its batches (hops and features): host, "
                                                    "device"))
    parser.add_argument("--pyg-python", help="interpreter with torch-geometric + pyg-lib or torch-sparse")
    args = parser.parse_args(argv)
    common = ["--dataset", args.dataset,  # both sides' flags: the same graph, sizes, threads and device
              "--fanout", args.fanout, "--batch-size", str(args.batch_size),
              "--hidden", str(args.hidden), "--threads", str(args.threads), "--device", args.device]
    chosen, skipped = precisions(args.precisions, args.device)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for where in args.sample_on.split(","):
            for precision in chosen:
                recs = run_train(1, [*common, "--root", root, "--epochs", "2", "--eval-every", "2",
                                     "--precision", precision, "--sample-on", where,
                                     "--feature-device", where, "--minibatch", "independent"])
                rows.append({"impl": f"mpignn ({precision}, {args.device}, batches on the {where})",
                             **{k: recs[-1][k] for k in ("epoch_s", "seeds_per_s", "test_acc", "sample_s")}})
    ref = pyg_python(args.pyg_python)
    if ref:
        # PyG's per-hop trimming needs num_sampled_nodes, which only its pyg-lib sampler provides.
        rows.append(run_reference(ref, "epoch", *common))
        base = rows[-1]["epoch_s"]
        for row in rows:
            row["vs_pyg"] = row["epoch_s"] / base
    print(f"{args.dataset}, fanout {args.fanout}, batch {args.batch_size}, hidden {args.hidden}, "
          f"{args.threads} threads, device {args.device}, second epoch timed"
          + ("" if ref else " (PyG rows skipped: no pyg-lib or torch-sparse; see --pyg-python)") + skipped)
    print(table(rows, [("impl", "implementation", "s"), ("epoch_s", "epoch s", ".2f"),
                       ("sample_s", "sample s", ".2f"), ("seeds_per_s", "seeds/s", ".0f"), ("test_acc", "test acc", ".4f"),
                       ("vs_pyg", "time / PyG", ".2f")]))
    return 0


if __name__ == "__main__":
    run_bench(main)
