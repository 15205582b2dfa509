"""The epoch record: built in one place from the reduced numbers, every key documented (`training.record`)."""
import json

from _records import FIELDS, undocumented
from mpignn.training.record import SCHEMA, append_jsonl, epoch_record, format_epoch, redundancy


def _record(**over):
    layers = 3
    total = {"loss_sum": 6.0, "correct": 3.0, "seeds": 4.0, "units": 8.0, "nodes": 40.0, "steps": 4.0,
             "remote_feature_bytes": 10.0, "remote_structure_bytes": 20.0, "embedding_bytes": 0.0, "cache_hits": 1.0,
             "remote_rows": 4.0, "halo_bytes": 64.0,
             **{f"rows_{j}": 100.0 * (j + 1) for j in range(layers)},
             **{f"counted_rows_{j}": 10.0 * (j + 1) for j in range(layers)},
             **{f"union_rows_{j}": [8.0, 10.0, 30.0][j] for j in range(layers)}}
    slowest = {"epoch_s": 2.0, "eval_s": 0.7, "sample_s": 0.5, "exchange_s": 0.1, "compute_s": 1.0, "allreduce_s": 0.2,
               "wait_s": 0.3, "peak_rss_mb": 500.0, "load_peak_rss_mb": 400.0, "train_peak_rss_mb": 450.0,
               "rss_mb": 0.0, "own_rows": [60.0, 40.0, 20.0]}
    args = dict(epoch=1, epochs_done=2.0, total=total, slowest=slowest, scores={"val_acc": 0.5, "test_acc": None},
                unit="seeds", layers=layers, world_size=2, minibatch="independent",
                graph_fields={"cache_rows": 3, "cache_mib": 0.5, "graph_mib": 2.0})
    return epoch_record(**{**args, **over})


def test_record_divides_sums_once_and_takes_the_slowest_rank():
    rec = _record()
    assert rec["loss"] == 1.5 and rec["train_acc"] == 0.75 and rec["seeds_per_s"] == 4.0 and rec["eval_s"] == 0.7
    assert rec["nodes_per_step"] == 10.0 and rec["cache_hit_rate"] == 0.25
    assert rec["rows_per_step"] == [50.0, 100.0, 150.0]  # 4 steps over 2 ranks: 2 steps of all ranks
    assert rec["own_rows_per_step"] == [60.0, 40.0, 20.0] and rec["halo_step_bytes"] == 32
    assert rec["redundancy"] == 2.0 and rec["rss_mb"] is None  # layer 1: 20 rows computed of 10 distinct
    assert "stopped_step" not in rec and set(FIELDS) - set(rec) == {"best_epoch", "best_val_acc",
                                                                   "test_acc_at_best_val"}
    stopped = _record(stopped_step=3, carried=("loss_sum", "seeds"))
    assert stopped["stopped_step"] == 3 and stopped["partial"] == {"loss_sum": 6.0, "seeds": 4.0}


def test_the_epoch_line_splits_the_time_into_sampling_exchange_compute_and_allreduce():
    """README: every epoch line splits the time into sampling, exchange, compute and all-reduce."""
    line = format_epoch(_record(), "val 0.5000")
    assert line.startswith("epoch   1 | loss 1.5000 | val 0.5000 | 2.00s 4 seeds/s eval 0.70s | ")
    assert "| sample 0.50 exch 0.10 compute 1.00 allreduce 0.20 wait 0.30 |" in line


def test_redundancy_skips_layers_without_a_union():
    assert redundancy([4.0, 9.0], [4.0, 0.0]) == 1.0
    assert redundancy([1.0], [0.0]) is None


def test_every_key_is_documented_once_with_unit_meaning_and_owner():
    assert undocumented(_record(stopped_step=1)) == []
    link = {"val_auc": 0.9, "test_auc": 0.9, "test_mrr": 0.3, "test_hits@10": 0.5, "edges_per_s": 1.0,
            "best_val_auc": 0.9, "test_auc_at_best_val": 0.8,
            "step": 5}
    assert undocumented(link) == []
    assert undocumented({"val_acc": 1, "new_field": 2, "train_auc_full2": 3}) == ["new_field", "train_auc_full2"]
    for name, field in SCHEMA.items():
        assert field.meaning and field.filled_by, name


def test_a_torn_last_metrics_line_is_dropped_before_the_next_record(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"epoch": 0}\n{"epoch": 1}\n{"epoch": 2, "lo')  # a run killed mid-write, then resumed
    append_jsonl(str(path), {"epoch": 2})
    append_jsonl(str(path), {"epoch": 3})
    assert path.read_text() == '{"epoch": 0}\n{"epoch": 1}\n{"epoch": 2}\n{"epoch": 3}\n'
    path.write_text('{"epoch": 0, "loss": ' + "9" * 200)  # torn in the first record
    append_jsonl(str(path), {"epoch": 0})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"epoch": 0}]


def test_metrics_to_redirected_stdout_cut_nothing_of_the_output(tmp_path):
    """--metrics-out /dev/stdout > run.log: run.log holds other output too, which may end mid-line."""
    import subprocess
    import sys

    log = tmp_path / "run.log"
    code = ("import sys; from mpignn.training.record import append_jsonl; sys.stdout.write('epoch 1 | partial'); "
            "sys.stdout.flush(); append_jsonl(sys.argv[1], {'epoch': 1})")
    for target in ("/dev/stdout", str(log)):
        with open(log, "w") as out:
            subprocess.run([sys.executable, "-c", code, target], stdout=out, check=True)
        assert log.read_text() == 'epoch 1 | partial{"epoch": 1}\n', target
