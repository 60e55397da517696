"""The benchmarks measure what they say: the two paths agree, the floor loop and the Lightning counters count right."""

import json
import time

import numpy as np
import pytest

from benchmarks import training
from benchmarks.dense import bag_gradients, dense_gradients, length_batches
from benchmarks.gradient_flow_rate import entry_floor
from benchmarks.timing import timed
from tests.helpers import TINY
from toksel.data.corpus import PackedSplit
from toksel.models.fused import FusedBags
from toksel.models.initial import initialise
from toksel.runtime.config import load_config


def test_batches_by_length_cover_every_row_once_within_the_budget():
    lengths = np.random.default_rng(0).integers(1, 50, size=200)
    batches = length_batches(lengths, positions=120)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(200))
    assert all(len(rows) * lengths[rows].max() <= 120 or len(rows) == 1 for rows in batches)


def test_the_dense_reference_and_the_bag_of_tokens_path_agree_on_sequences_of_unequal_length():
    rng = np.random.default_rng(1)
    sequences = [rng.integers(0, 30, size=rng.integers(1, 40)) for _ in range(64)]
    split = PackedSplit.from_sequences(sequences, rng.integers(0, 2, size=64), vocab_size=30)
    init = initialise(30, 16, seed=2)
    E, p, v = (x.numpy() for x in (init.E, init.p, init.v))
    p = 5 * p  # a peaked softmax, so the mask and the shift matter
    dense = dense_gradients(E, p, v, split)
    assert dense.relative_difference(bag_gradients(E, p, v, FusedBags.from_split(split))) < 1e-12
    assert dense.relative_difference(bag_gradients(E, p, -v, FusedBags.from_split(split))) > 1e-3  # it can fail


def test_the_bare_pass_over_the_entries_gathers_and_scatters_each_entry_once():
    rng = np.random.default_rng(3)
    sequences = [rng.integers(0, 20, size=rng.integers(1, 30)) for _ in range(50)]
    bags = FusedBags.from_split(PackedSplit.from_sequences(sequences, rng.integers(0, 2, size=50), vocab_size=20))
    a, b = rng.normal(size=20), rng.normal(size=20)
    expected = np.zeros(20)
    np.add.at(expected, bags.tokens, bags.counts * a[bags.tokens] * b[bags.tokens])
    assert np.allclose(entry_floor(a, b, bags), expected, rtol=1e-12, atol=0)


def test_the_timer_keeps_the_first_result_and_one_mean_per_run():
    calls = []
    timing = timed(lambda: calls.append(len(calls)) or len(calls), repeats=3, calls=4, warm_up=True)
    assert len(calls) == 1 + 3 * 4 and timing.result == 2  # the warm-up call returned 1
    assert len(timing.seconds) == 3 and timing.median == sorted(timing.seconds)[1]


def test_lightning_throughput_counts_the_steps_reviews_and_padding_of_its_windows(prepared):
    config = load_config(TINY)
    bags = training.one_layer_step(config, "synthetic", windows=2, steps=2)
    assert bags.windows == 2 and bags.steps_per_second > 0
    assert bags.tokens_per_second == bags.padded_tokens_per_second  # bags have no padding
    train_rows = bags.sequences_per_second / bags.steps_per_second  # one batch per epoch: every training row
    assert train_rows == pytest.approx(round(80 * (1 - config.train.val_fraction)))
    positions = training.two_layer_step(config, "synthetic", bucketed=False, max_len=4, windows=2, steps=2)
    assert 0 < positions.tokens_per_second <= positions.padded_tokens_per_second
    assert positions.padded_tokens_per_second / positions.sequences_per_second == pytest.approx(4)  # cut to 4


def test_the_numba_and_torch_passes_in_p_compute_the_same_gradient():
    from benchmarks.overheads import pass_in_p, training_step_floor

    rng = np.random.default_rng(4)
    sequences = [rng.integers(0, 25, size=rng.integers(1, 30)) for _ in range(40)]
    split = PackedSplit.from_sequences(sequences, rng.integers(0, 2, size=40), vocab_size=25)
    init = initialise(25, 16, seed=5)
    E, p, v = (np.ascontiguousarray(x.numpy()) for x in (init.E, init.p, init.v))
    times = pass_in_p(E, 5 * p, v, FusedBags.from_split(split), split, repeats=1)
    assert times.relative_difference < 1e-10 and min(times.numba, times.torch_float64, times.torch_float32) > 0
    assert training_step_floor(60_000_000, 25e9) == pytest.approx(9 * 60e6 / 25e9)


def test_the_repro_timing_splits_a_stamped_log_by_stage_kind(tmp_path):
    from benchmarks.repro_timing import breakdown, table

    log = tmp_path / "repro.log"
    log.write_text("100 Running stage 'prepare@synthetic':\n100 > python -m pipelines.prepare\n"
                   "103 Running stage 'one_step@synthetic':\n104 some output\n"
                   "110 Running stage 'one_step@imdb':\n130 Updating lock file 'dvc.lock'\n131 TOTAL 31 s\n")
    found = breakdown(log)
    assert found.stages == {"prepare": [3.0], "one_step": [7.0, 21.0]} and found.total == 31.0
    assert table([log])[-1] == "| **all** | **3, 31 s** |"


def test_a_variants_log_is_split_by_what_dvc_decided_for_each_stage(tmp_path):
    from benchmarks.repro_timing import loop

    log = tmp_path / "variant.log"
    log.write_text("100 profile quick: starting\n104 Running stage 'check_params':\n"
                   "109 Stage 'prepare@imdb' didn't change, skipping\n110 Stage 'one_step@synthetic' is cached - "
                   "skipping run, checking out outputs\n114 Running stage 'one_step@imdb':\n130 exit 0\n")
    assert loop(log).splitlines() == [
        "variant.log: 30 s; before the first stage 4 s; ran 2 stages, 21 s; restored 1 stages, 4 s; "
        "unchanged 1 stages, 1 s", "  ran: check_params 5 s, one_step@imdb 16 s"]


def test_the_interruption_check_compares_every_number_but_the_timings(tmp_path):
    from benchmarks.interruptions import differences, metrics

    (tmp_path / "results" / "stage").mkdir(parents=True)
    record = {"slope": 0.5, "seconds": 3.0, "seed0": {"loss": float("nan"), "curve": [1, 2]}, "name": "x"}
    (tmp_path / "results" / "stage" / "metrics.json").write_text(json.dumps(record))
    found = metrics(tmp_path)
    assert set(found) == {f"results/stage/metrics.json.{key}" for key in ("slope", "seed0.loss", "seed0.curve[0]",
                                                                            "seed0.curve[1]")}
    assert differences(found, dict(found)) == []  # NaN equals NaN here: the same run
    changed = {**found, "results/stage/metrics.json.slope": 0.25}
    assert differences(changed, found) == ["results/stage/metrics.json.slope"]
    assert differences({}, found) == sorted(found)


def test_the_output_comparison_finds_a_moved_number_in_each_kind_of_file_and_lets_timings_and_new_keys_be(tmp_path,
                                                                                                           capsys):
    from benchmarks.compare_outputs import main as compare

    def write(root, loss, seconds, extra=None):
        folder = root / "results" / "stage"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({"loss": loss, "seconds": seconds, "nan": float("nan"),
                                                         **(extra or {})}))
        (folder / "table.csv").write_text(f"a,b\n1,{loss}\n2,x\n")
        np.savez(folder / "arrays.npz", p=np.array([loss, np.nan]))

    write(tmp_path / "old", 0.5, 1.0)
    write(tmp_path / "same", 0.5, 9.0, {"followed": 1.0})  # another run's timing; a metric added
    write(tmp_path / "moved", 0.5000000001, 1.0)
    assert compare([str(tmp_path / "old"), str(tmp_path / "same")]) == 0
    assert "1 keys new" in capsys.readouterr().out
    assert compare([str(tmp_path / "old"), str(tmp_path / "moved")]) == 1
    said = capsys.readouterr().out
    assert "3 differences" in said and "metrics.json: .loss" in said and "table.csv: b[0]" in said


def test_the_lock_benchmark_builds_the_same_stages_in_one_dvc_yaml_or_several_and_runs_each(tmp_path):
    from benchmarks.lock_split import build, lock_lines, seconds_to_repro

    for files in (1, 2):
        root = tmp_path / f"files{files}"
        build(root, n_stages=3, n_files=files)
        assert len(list(root.rglob("dvc.yaml"))) == files
        assert seconds_to_repro(root, files) > 0
        assert sorted(path.name for path in (root / "out").iterdir()) == ["0.txt", "1.txt", "2.txt"]
        assert len(list(root.rglob("dvc.lock"))) == files and lock_lines(root) > 3 * 12


def test_the_gpu_benchmark_reads_dmon_samples_in_each_steps_window():
    from benchmarks.gpu import dmon_samples

    text = ("#Time        gpu     sm    mem    enc    dec\n#HH:MM:SS    Idx      %      %      %      %\n"
            " 10:00:01      0      0      0      0      0\n 10:00:02      0     73     12      0      0\n"
            " 10:00:03      0      -      -      -      -\n")
    day = time.mktime((2026, 11, 29, 9, 0, 0, 0, 0, -1))
    samples = dmon_samples(text, day)
    assert [sm for _, sm in samples] == [0.0, 73.0]  # headers and a sample without a reading left out
    assert samples[1][0] - samples[0][0] == 1 and time.localtime(samples[0][0]).tm_hour == 10


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
def test_the_gpu_benchmark_times_each_step_within_the_budget_and_says_which_it_stopped(tmp_path):
    from benchmarks.gpu import Step, run_steps, table

    steps = [Step("quick", ["json.tool", "--help"]), Step("slow", ["timeit", "-n", "1", "import time; time.sleep(30)"]),
             Step("late", ["json.tool", "--help"])]
    run_steps(steps, budget=8, out=tmp_path)
    assert [step.status for step in steps] == ["done", "stopped: the budget was spent",
                                               "not started: the budget was spent"]
    assert steps[1].seconds < 12 and steps[0].busy is None  # no nvidia-smi here: no busy share, said so
    text = table(steps, "no GPU", {})
    assert "| slow | stopped: the budget was spent |" in text and "n/a (no nvidia-smi)" in text


def test_the_gpu_benchmark_sets_each_metric_against_the_cpu_runs_interval(tmp_path):
    from benchmarks.gpu import against_cpu

    def write(root, arm, seed, values):
        folder = root / "results" / "train" / "imdb" / arm / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(values))

    for arm in ("trained", "untrained", "one_step"):
        for seed, accuracy in enumerate((0.86, 0.87, 0.88)):
            write(tmp_path / "cpu", arm, seed, {"test_accuracy": accuracy, "seconds": 100.0 + seed, "lr": 0.001})
        write(tmp_path / "gpu", arm, 0, {"test_accuracy": 0.95 if arm == "trained" else 0.861, "seconds": 9.0,
                                         "lr": 0.001})
    found = against_cpu("imdb", tmp_path / "gpu", tmp_path / "cpu")
    by = {(row["arm"], row["metric"]): row for row in found["rows"]}
    assert ("trained", "seconds") not in by  # the timings differ by design
    assert by[("untrained", "test_accuracy")]["within"] and by[("trained", "lr")]["within"]
    assert not by[("trained", "test_accuracy")]["within"] and not found["within"]  # 0.09 off: past 0.0248


def test_the_cost_model_takes_its_gpu_columns_from_the_newest_gpu_measurement(tmp_path):
    from benchmarks.cost_model import measured_gpu_steps

    assert measured_gpu_steps(tmp_path) is None  # no GPU has measured: the FLOPs bounds stay, said so
    for day, seconds in (("2026-11-01", 0.5), ("2026-12-01", 0.02)):
        (tmp_path / f"gpu-{day}.json").write_text(json.dumps([{"dataset": "imdb", "variant": "two_layer",
                                                                "seconds_per_step": seconds}]))
    assert measured_gpu_steps(tmp_path) == ("gpu-2026-12-01.json", {("two_layer", "imdb"): 0.02})
