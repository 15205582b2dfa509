"""The scaling benchmark: core binding per row, and a tiny end-to-end run that prints its table."""
import json
import os
import re
import subprocess
import sys

import pytest

from mpignn.bench._common import binding, pyg_python


def _fake_launcher(tmp_path, banner):
    exe = tmp_path / "mpiexec"
    exe.write_text(f"#!/bin/sh\necho '{banner}'\n")
    exe.chmod(0o755)
    return str(exe)


def test_binding_per_launcher(tmp_path):
    assert binding(_fake_launcher(tmp_path, "HYDRA build details:"), 2, 1) == (["-bind-to", "core:1"], None)
    assert binding(_fake_launcher(tmp_path, "mpiexec (Open MPI) 4.1.5"), 2, 1) == (["--bind-to", "core"], None)
    assert binding(_fake_launcher(tmp_path, "something else"), 2, 1) == ([], None)
    assert binding("unused", 1, 0) == ([], None)  # 0 = unbound
    assert binding("unused", 1, 10_000) == ([], None)  # more cores than the machine: unbound


def test_one_rank_is_pinned_to_its_cores():
    _, pin = binding("unused", 1, 1)
    code = "import os; print(len(os.sched_getaffinity(0)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=pin, check=True)
    assert out.stdout.strip() == "1"


@pytest.mark.mpi
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_bench_prints_a_row_per_config(tmp_path, bench_in_pool):
    code, out, _ = bench_in_pool([
        "--dataset", "synthetic:num_nodes=4000,avg_degree=8,num_features=16", "--ranks", "2", "--epochs", "1",
        "--batch-size", "256", "--hidden", "32", "--fanout", "5,5", "--root", tmp_path, "--plot", "",
        "--configs", "1x1,metis+cache,coop,metis+bf16+labor2"])
    assert code == 0, out
    rows = _table(out)
    assert "1 rank x 1 thread" in rows and "2 ranks metis+cache" in rows
    labor = rows["2 ranks metis, no cache, bf16 features, labor-2"]  # bf16 features, --labor-iterations 2
    assert float(labor["feat MiB"]) > 0  # feature MiB moved (no cache)
    assert rows["1 rank x 1 thread"]["x first row"] == "1.00"  # the baseline
    coop = rows["2 ranks metis, cooperative"]
    assert coop["redundancy"] == "1.00" and float(coop["rows MiB/step"]) > 0
    assert float(rows["2 ranks metis+cache"]["redundancy"]) > 1.0
    plain = rows["2 ranks metis+cache"]  # the same draws' sizes with and without a cache
    assert 0 < float(labor["input rows/step"]) < float(plain["input rows/step"]) and 0 < float(labor["test score"]) <= 1


def _rows(stdout):
    """[{header: cell}] of a bench table's rows (cells separated by two or more spaces)."""
    lines = stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("config"))
    names = re.split(r"\s{2,}", lines[top].strip())
    return [dict(zip(names, re.split(r"\s{2,}", line.strip()), strict=False)) for line in lines[top + 2:]
            if line.strip()]


def _table(stdout):
    """{config: {header: cell}} of a bench table."""
    return {row["config"]: {k: v for k, v in row.items() if k != "config"} for row in _rows(stdout)}


@pytest.fixture
def bench_in_pool(monkeypatch, capsys, tmp_path_factory):
    """`python -m mpignn.bench[.MODULE] ARGV` in this process, each row's `mpignn.train` (and `mpignn.predict`)
    run in the tests' standing job of its ranks (no fresh ranks a row; the rows' core binding is left out);
    -> run(argv, module=mpignn.bench.__main__): (exit code, the printed output, the `launcher` each row was
    given)."""
    from mpignn.bench import __main__ as bench
    from mpignn.bench import predict as bench_predict

    from _mpirun import records, run_cli_many, train_runs

    launchers = []

    def pooled(np_, args, timeout=3600, *, cores_per_rank=0, env=None, launcher=None):
        assert env is None
        launchers.append(launcher)
        base = tmp_path_factory.mktemp("bench-row")
        return records(base, train_runs(np_, base, args, {"row": []}, timeout), "row")[0]

    def pooled_predict(ranks, threads, checkpoint, out, chunk, halo_mib=""):
        base = tmp_path_factory.mktemp("bench-predict")
        argv = ["mpignn.predict", *bench_predict.predict_args(threads, checkpoint, out, chunk, halo_mib)]
        codes, log = run_cli_many(ranks, {"row": argv}, base)["row"]
        return bench_predict.read_row(log, set(codes) == {0}, " ".join(argv))

    def run(argv, module=bench):
        monkeypatch.setattr(module, "run_train", pooled)
        if module is bench_predict:
            monkeypatch.setattr(module, "predict", pooled_predict)
        code = module.main([str(a) for a in argv])
        return code, capsys.readouterr().out, launchers

    return run


@pytest.mark.mpi
def test_link_bench_caps_steps_and_passes_train_flags(tmp_path, bench_in_pool):
    code, out, _ = bench_in_pool([
        "--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=16", "--task", "link", "--ranks", "2",
        "--epochs", "1", "--batch-size", "128", "--hidden", "16", "--fanout", "4,4", "--configs", "1x1,metis+cache",
        "--max-steps", "3", "--root", tmp_path, "--plot", "", "--train-args",
        "--link-test 0.02 --link-val 0.02 --link-tails 3"])
    assert code == 0, out
    assert "link task" in out and "edges/s" in out, out
    assert list(tmp_path.glob("**/links/SPLIT.json")), "the link split was not written"
    split = json.loads(next(tmp_path.glob("**/links/SPLIT.json")).read_text())
    assert split["test"] == 0.02 and split["num_tails"] == 3, split  # --train-args reached mpignn.train


def test_bench_names_an_unknown_config(capsys):
    from mpignn.bench.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["--configs", "1x1,metis+int8"])
    err = capsys.readouterr().err
    assert exc.value.code != 0 and "unknown 'metis+int8'" in err, err[-1000:]


@pytest.mark.parametrize("flags", [["--graphs", "1000"], ["--graphs", "1000:x"], ["--threads", "two"]])
def test_the_sampler_bench_refuses_a_malformed_graph_or_thread_list_in_one_line(flags, capsys):
    from mpignn.bench.sampler import main

    with pytest.raises(SystemExit) as exc:
        main(flags)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--graphs takes NODES:DEGREE pairs" in err and "HINT: --graphs 200000:20" in err


@pytest.mark.mpi
def test_time_to_accuracy_calibrates_then_trains_every_row_to_the_target(tmp_path, bench_in_pool):
    """auto: calibration runs of the first row (one per seed) give the target, their mean; each seed's run of
    the row then stops where it reaches it, and the row reports the mean and each seed's time."""
    code, out, _ = bench_in_pool([
        "--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=16", "--batch-size", "128", "--hidden", "16",
        "--fanout", "4,4", "--configs", "1x1", "--target-acc", "auto", "--max-epochs", "3", "--evals-per-epoch", "2",
        "--seeds", "0,1", "--root", tmp_path, "--plot", ""])
    assert code == 0, out
    target = float(out.split("  target: ")[1].split()[0])
    rows = [line.split() for line in out.splitlines() if line.startswith("1 rank x")]
    assert len(rows) == 1 and f"{target:.4f}" in out
    for row in rows:
        assert row[5] == "yes" and float(row[8]) >= target - 5e-5, row  # reached, val acc printed to 4 places
        # each seed's run stops at a half epoch, so their mean is a multiple of a quarter
        assert 0 < float(row[7]) <= 3 and float(row[7]) * 4 == int(float(row[7]) * 4)
        assert row[9] != "-", row  # the test accuracy where it reached the target
        per_seed = [float(v) for v in row[-1].split("/")]
        assert len(per_seed) == 2 and abs(sum(per_seed) / 2 - float(row[6])) < 0.06, row  # the mean of the seeds


@pytest.mark.mpi
def test_each_row_runs_once_per_link_rate_and_says_whether_the_records_repeat(tmp_path, bench_in_pool):
    """--launcher with {rate} and --rates: each configuration once per rate, in that launcher (multihost-mpirun
    -r in docs/node-local.md's table), and whether its records (but times and memory) equal the first rate's."""
    code, out, launchers = bench_in_pool([
        "--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=16", "--epochs", "1", "--batch-size", "128",
        "--hidden", "16", "--fanout", "4,4", "--configs", "metis,coop", "--root", tmp_path, "--plot", "",
        "--launcher", "hosts-mpirun -H 2 -r {rate} --", "--rates", "1gbit,100mbit"])
    assert code == 0, out
    assert launchers == [["hosts-mpirun", "-H", "2", "-r", rate, "--"] for rate in ("1gbit", "100mbit")] * 2
    rows = _rows(out)
    assert [(r["config"], r["link"]) for r in rows] == [(c, rate) for c in ("2 ranks metis, no cache",
                                                                           "2 ranks metis, cooperative")
                                                        for rate in ("1gbit", "100mbit")]
    assert {r["records = first link's"] for r in rows} == {"yes"}, out
    assert [r["trained as"] for r in rows] == ["independent"] * 2 + ["cooperative"] * 2


@pytest.mark.parametrize("flags,named", [
    (["--rates", "1gbit"], "--rates and a {rate} in --launcher go together"),
    (["--launcher", "srun -r {rate}"], "--rates and a {rate} in --launcher go together"),
    (["--launcher", "srun", "--configs", "1x1,metis"], "leave the 1-rank configurations"),
])
def test_launcher_flags_that_cannot_work_are_refused(flags, named, capsys):
    from mpignn.bench.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(flags)
    assert exc.value.code == 2 and named in capsys.readouterr().err


def test_time_to_a_test_score_reads_the_test_split():
    from mpignn.bench.__main__ import _reach

    recs = [{"epoch_s": 1.0, "epochs_done": 1.0, "val": 0.80, "test": 0.70},
            {"epoch_s": 2.0, "epochs_done": 2.0, "val": 0.81, "test": None},  # not evaluated
            {"epoch_s": 3.0, "epochs_done": 3.0, "val": 0.79, "test": 0.76}]
    assert _reach(recs, 0.80)["seconds"] == 1.0
    hit = _reach(recs, 0.75, "test")
    assert (hit["seconds"], hit["epochs"], hit["test"]) == (6.0, 3.0, 0.76) and _reach(recs, 0.77, "test") is None


@pytest.mark.mpi
def test_target_test_stops_training_where_the_test_score_reaches_it(tmp_path):
    from _mpirun import records, train_runs

    common = ["--dataset", "synthetic:num_nodes=1500,avg_degree=6,num_features=8,num_classes=4", "--root", tmp_path,
              "--fanout", "4,3", "--hidden", "16", "--batch-size", "128", "--epochs", "20", "--minibatch",
              "independent", "--target-test", "0.3"]
    recs, out = records(tmp_path, train_runs(1, tmp_path, common, {"target": []}), "target")
    assert len(recs) < 20 and recs[-1]["test_acc"] >= 0.3 and all(r["test_acc"] < 0.3 for r in recs[:-1])
    assert re.search(r"test acc 0\.\d{4} reached --target-test 0\.3000 after", out)


def test_floor_row_takes_the_slowest_rank():
    from mpignn.bench.floor import _row

    row = _row("2 ranks", [{"times": [0.1, 0.1, 1.0], "rows": 60.0, "inputs": 90.0, "halo": 2**20,
                            "redundancy": 1.5},
                           {"times": [0.2, 0.1, 1.5], "rows": 70.0, "inputs": 95.0, "halo": 2**21}])
    assert row["seconds"] == pytest.approx(1.8) and row["compute"] == 1.5 and row["rows"] == 70.0
    assert row["all_rows"] == 130.0 and row["inputs"] == 185.0 and row["halo_mib"] == 3.0
    assert row["redundancy"] == 1.5  # rank 0 counts it for all


@pytest.mark.mpi
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_floor_bench_prints_one_rank_and_communication_free_rows(tmp_path, monkeypatch, capsys):
    """The bench in this process, each row's ranks in the tests' standing job of that many ranks (their core
    binding left out)."""
    from mpignn.bench import floor

    from _mpirun import run_python

    def pooled(folder, ranks, threads, args, cooperative=False, sampler="neighbor"):
        rc, out = run_python(ranks, [floor.__file__, *floor.worker_args(folder, threads, args, cooperative, sampler)],
                             timeout=300)
        assert rc == 0, out[-3000:]
        return json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("[{")))

    monkeypatch.setattr(floor, "_launch", pooled)
    assert floor.main(["--dataset", "synthetic:num_nodes=4000,avg_degree=8,num_features=16", "--ranks", "2",
                       "--steps", "3", "--batch-size", "256", "--hidden", "32", "--fanout", "5,5",
                       "--root", str(tmp_path), "--labor"]) == 0
    rows = {name: {k: float(v) for k, v in cells.items()} for name, cells in _table(capsys.readouterr().out).items()}
    one, two = rows["1 rank x 1 thread"], rows["2 ranks x 1 thread, no communication"]
    coop = rows["2 ranks x 1 thread, cooperative"]
    assert "1 rank x 2 threads" in rows and one["x 1x1"] == 1.0
    # a rank's half of the batch computes fewer layer-1 rows than the whole batch on one rank; the next
    # column adds the ranks' rows (the overlap shows as a sum above the one-rank count on real graphs)
    rows1, all1 = "layer-1 rows/rank", "layer-1 rows, all ranks"
    assert two[rows1] < one[rows1] and two[all1] > two[rows1]
    # cooperative ranks compute each row once: fewer input rows in all than independent halves, rows moved
    assert coop["input rows, all ranks"] < two["input rows, all ranks"] and coop["rows moved MiB/step"] > 0
    assert coop["redundancy"] == 1.0 and two["redundancy"] > 1.0 and one["redundancy"] == 1.0
    # --labor: the same rows with layer-neighbour sampling, on fewer input rows
    labor_one, labor_two = rows["1 rank x 1 thread, labor"], rows["2 ranks x 1 thread, no communication, labor"]
    assert labor_one["input rows, all ranks"] < one["input rows, all ranks"]
    assert labor_two["input rows, all ranks"] < two["input rows, all ranks"]


@pytest.mark.mpi
def test_predict_bench_prints_a_row_per_config(tmp_path, bench_in_pool):
    from mpignn.bench import predict

    code, out, _ = bench_in_pool(["--dataset", "synthetic:num_nodes=2000,avg_degree=6,num_features=8", "--hidden",
                                  "16", "--configs", "1x1,2x1", "--root", tmp_path], predict)
    assert code == 0, out
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if " x 1 thread" in line}
    one, two = rows["1 rank x 1 thread"], rows["2 ranks x 1 thread"]
    # columns after the config's 5 words: layers s, nodes/s, x first, row exchanges, fetched MiB, peak MiB
    assert "2000 nodes" in out and float(one[9]) == 0.0 and float(two[9]) > 0  # only 2 ranks fetch rows
    assert int(two[8]) == 3  # each of the 3 layers' halo rows cross at once (--halo-mib)
    assert float(one[6]) > 0 and float(two[6]) > 0 and float(one[10]) > 0 and float(two[10]) > 0


@pytest.mark.mpi
def test_the_epoch_bench_draws_on_the_host_and_on_the_device_and_says_why_pyg_is_missing(tmp_path, bench_in_pool):
    from mpignn.bench import epoch

    code, out, _ = bench_in_pool(["--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=16",
                                  "--batch-size", "256", "--hidden", "16", "--fanout", "5,5", "--threads", "1",
                                  "--precisions", "fp32"], epoch)
    assert code == 0, out
    lines = out.splitlines()
    rows = {line.split("  ")[0]: line.split() for line in lines if line.startswith("mpignn (")}
    host, device = rows["mpignn (fp32, cpu, batches on the host)"], rows["mpignn (fp32, cpu, batches on the device)"]
    assert host[-2] == device[-2]  # the same draws: the same test accuracy
    if pyg_python(None) is None:  # no pyg-lib, no torch-sparse: the row is skipped, and the line says why
        assert "PyG rows skipped: no pyg-lib or torch-sparse" in out


def test_the_epoch_bench_times_bf16_only_where_the_cpu_has_bf16_units(monkeypatch):
    """Without the units a bf16 epoch is emulated, many times the fp32 one: `auto` leaves it out and says so."""
    import torch

    from mpignn.bench import epoch

    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    for units in (False, True):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: units)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
        chosen, note = epoch.precisions("auto", "cpu")
        assert chosen == (["fp32", "bf16"] if units else ["fp32"])
        assert ("bf16 skipped: this CPU has no bf16 units" in note) is not units
        assert epoch.precisions("fp32,bf16", "cpu") == (["fp32", "bf16"], "")  # asked for: timed anyway
        assert epoch.precisions("auto", "cuda")[0] == ["fp32", "bf16"]


def test_the_sampler_bench_counts_fewer_labor_rows_with_more_iterations(capsys, tmp_path):
    """`bench.sampler --labor` on a small graph: each iteration concentrates a hop's sources, so the rows fall
    from neighbour sampling to LABOR-0 to LABOR-3, and one variate per node for every hop takes fewer still."""
    from mpignn.bench import sampler

    graph = "synthetic:num_nodes=3000,avg_degree=15,num_features=4,num_classes=3"
    assert sampler.main(["--dataset", graph, "--root", str(tmp_path), "--fanout", "5,5", "--batch-size", "128",
                         "--batches", "2", "--labor", "0,1,3", "--same-variates"]) == 0
    out = capsys.readouterr().out
    rows = {m.group(1).strip(): int(m.group(2).replace(",", ""))
            for m in re.finditer(r"^(neighbor|LABOR-\d+(?:, one variate per node for every hop)?)\s+([\d,]+)",
                                 out, re.M)}
    assert rows["LABOR-3"] < rows["LABOR-1"] < rows["LABOR-0"] < rows["neighbor"], rows
    assert rows["LABOR-3, one variate per node for every hop"] <= rows["LABOR-3"], rows
    assert "draw ms/step" in out


def test_fullgraph_rounds_take_each_rows_median_and_print_each_rounds_ratio(monkeypatch, capsys):
    from mpignn.bench import fullgraph
    # the rows in turn, round by round: 1 x all, 1 x 1, N ranks; each run's epochs after the first are timed
    epochs = iter([0.1, 0.2, 0.1, 0.1, 0.3, 0.2, 0.2, 0.2, 0.1])
    calls = []

    def fake_run(ranks, args, cores_per_rank=0):
        calls.append(ranks)
        epoch = next(epochs)
        return [{"epoch_s": 9.0, "rows_per_step": [10]}] + [{"epoch_s": epoch, "rows_per_step": [10]}] * 2

    monkeypatch.setattr(fullgraph, "run_train", fake_run)
    assert fullgraph.main(["--dataset", "synthetic:num_nodes=10", "--rounds", "3", "--no-pyg", "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    assert calls == [1, 1, 2] * 3
    assert "1 rank x 1 thread        0.200" in out  # the median of 0.2, 0.3, 0.2
    assert "each round: 2.00x, 1.50x, 2.00x (median 2.00x)" in out, out


@pytest.mark.mpi
def test_soak_bench_runs_each_malloc_policy_and_compares_them(capsys):
    from mpignn.bench import soak

    assert soak.main(["--dataset", "synthetic:num_nodes=1500,avg_degree=6,num_features=8,num_classes=3",
                      "--ranks", "1", "--epochs", "2", "--malloc", "heap,system", "--", "--threads", "1",
                      "--hidden", "16", "--fanout", "4,3", "--minibatch", "independent"]) == 0
    out = capsys.readouterr().out
    assert "malloc: heap" in out and "malloc: system" in out
    summary = out.split("growth after epoch 3 %")[1].splitlines()
    rows = [line.split() for line in summary if line.startswith(("heap ", "system "))]
    assert [r[0] for r in rows] == ["heap", "system"] and rows[0][2] == "1.000" and 0 < float(rows[1][2]) < 100
    assert soak.growth([100.0, 100, 100, 100, 104, 110]) == pytest.approx(10.0)


def test_a_bench_without_mpiexec_says_so_in_one_line(tmp_path):
    code = ("import sys, runpy, mpignn.bench._common as c; c.mpiexec_path = lambda: None; "
            "sys.argv = ['bench', '--configs', '1x1', '--plot', '']; "
            "runpy.run_module('mpignn.bench', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip() == ("error: expected mpiexec on PATH or beside this Python; found none. HINT: pip "
                                  "install mpich (or load your site MPI)"), out.stderr[-2000:]
