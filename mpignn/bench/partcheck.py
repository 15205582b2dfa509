"""`python -m mpignn.bench.partcheck`: what the contents checks (`partition.validate`) cost beside loading a part.

Per part, in CPU seconds (the least of `--repeat` runs; the page cache is warm after the first): the load as
training does it (mapped, checksums verified) without the contents checks, and what the checks add to it
(the id arrays' range taken during their checksum read, `validate.sha256_and_max`, plus the other checks);
`checked load s` is the whole checked load, as a cross-check. Beside it: a load without checksums, and the
checks alone there (every id array scanned). Without `--folder` it partitions `--dataset` first.

    python -m mpignn.bench.partcheck --folder /tmp/big/p4 --parts 0,1 --repeat 5
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Callable

__all__ = ["main", "measure"]

DEFAULT = "synthetic:num_nodes=2000000,avg_degree=25,num_features=100"


def _min_cpu_s(fn: Callable[[], object], repeat: int) -> float:
    """The least CPU time (this process's user + system) of `repeat` calls: on a shared machine other
    processes stretch wall time, not this."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def measure(folder: str | Path, part_id: int, repeat: int = 3) -> dict:
    """CPU seconds to load part `part_id` of `folder` as training does (mapped, checksums verified) without
    the contents checks, what the checks add to it, and the same without checksums."""
    from mpignn.fileio import sha256_file
    from mpignn.partition import load_partition
    from mpignn.partition.format import HETERO_FILES, PART_FILES, part_dir
    from mpignn.partition.validate import SCANNED, check_meta, check_part, sha256_and_max

    load_partition(folder, part_id, mmap=True)  # warm the page cache and fail early on a bad part
    pdir = part_dir(folder, part_id)
    load = _min_cpu_s(lambda: load_partition(folder, part_id, mmap=True, check=False), repeat)
    loaded = _min_cpu_s(lambda: load_partition(folder, part_id, mmap=True), repeat)
    part = load_partition(folder, part_id, mmap=True, verify=False, check=False)
    arrays = {name: getattr(part, name) for name in PART_FILES + (HETERO_FILES if part.meta.hetero else ())}
    scanned = {name: sha256_and_max(pdir / f"{name}.npy")[1] for name in SCANNED}
    # what the checks add to a verified load: the max taken during the id arrays' checksum read, and the rest
    fused = _min_cpu_s(lambda: [sha256_and_max(pdir / f"{name}.npy") for name in SCANNED], repeat)
    plain = _min_cpu_s(lambda: [sha256_file(pdir / f"{name}.npy") for name in SCANNED], repeat)
    rest = _min_cpu_s(lambda: (check_meta(part.meta, folder),
                               check_part(part.meta, part_id, arrays, pdir, folder, scanned)), repeat)
    nosum = _min_cpu_s(lambda: load_partition(folder, part_id, mmap=True, verify=False, check=False), repeat)
    scan = _min_cpu_s(lambda: (check_meta(part.meta, folder), check_part(part.meta, part_id, arrays, pdir, folder)),
                      repeat)
    added = max(0.0, fused - plain) + rest
    return {"part": part_id, "nodes": part.hi - part.lo, "edges": len(part.col),
            "mib": sum(a.nbytes for a in arrays.values()) / 2**20, "load_s": load, "added_s": added,
            "share": 100 * added / (load + added), "loaded_s": loaded, "nosum_s": nosum, "scan_s": scan,
            "share_nosum": 100 * scan / (nosum + scan)}


def main(argv: list[str] | None = None) -> int:
    from mpignn.bench._common import table

    parser = argparse.ArgumentParser(prog="python -m mpignn.bench.partcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="", help="a partition folder (default: partition --dataset first)")
    parser.add_argument("--dataset", default=DEFAULT)
    parser.add_argument("--num-parts", type=int, default=4, help="parts of the folder made without --folder")
    parser.add_argument("--parts", default="0", help="comma-separated part ids to time")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder) if args.folder else Path(tmp) / "parts"
        if not args.folder:
            from mpignn.data import load_dataset
            from mpignn.partition import partition_graph

            partition_graph(load_dataset(args.dataset, tmp), args.num_parts, folder, method="random",
                            dataset=args.dataset)
        rows = [measure(folder, int(p), args.repeat) for p in args.parts.split(",")]
    print(f"{folder}: least CPU seconds of {args.repeat} warm loads (mapped); checks % = checks / (load + checks)")
    print(table(rows, [("part", "part", "d"), ("nodes", "nodes", "d"), ("edges", "edges", "d"),
                       ("mib", "MiB", ".0f"), ("load_s", "load s", ".3f"), ("added_s", "checks s", ".4f"),
                       ("share", "checks %", ".2f"), ("loaded_s", "checked load s", ".3f"),
                       ("nosum_s", "no sha256: load s", ".3f"), ("scan_s", "checks s", ".4f"),
                       ("share_nosum", "checks %", ".1f")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
