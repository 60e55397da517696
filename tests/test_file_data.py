"""A dataset from the project's own file (data.source: file), added by params alone: its formats, its test split,
its bad input (one line, exit 2), its MLflow input, and DVC rerunning its stages when the file changes."""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from pipelines import check_params, evaluate, gradient_flow, one_step, prepare
from tests.helpers import ROOT, dataset_entry, dvc, stages_run
from toksel.data.sources import load_text_splits
from toksel.report.header import dataset_rows
from toksel.runtime.cli import RunNaming
from toksel.runtime.config import load_config

GOOD, BAD = ["great", "superb", "lovely"], ["awful", "dull", "boring"]


def reviews(n: int = 30) -> pd.DataFrame:
    """n reviews, labels alternating: four neutral words and one word of the review's side."""
    rng = np.random.default_rng(3)
    stars = np.arange(n) % 2
    texts = [" ".join([*rng.choice([f"plain{i}" for i in range(12)], 4), str(rng.choice(GOOD if y else BAD))])
             for y in stars]
    return pd.DataFrame({"review": texts, "stars": stars, "extra": range(n)})


def add_file_dataset(project, name="mine", **data) -> None:
    """An entry of `datasets` in the project's params.yaml for a file dataset of columns review and stars."""
    params = OmegaConf.load(project / "params.yaml")
    params.datasets[name] = dataset_entry(
        data={"source": "file", "path": "data/own/reviews.csv", "text_column": "review", "label_column": "stars",
              **data}, model={"d": 64}, gradient_flow={"max_margin": False})
    OmegaConf.save(params, project / "params.yaml")


@pytest.fixture
def own_project(project):
    """The project with data/own/reviews.csv and a dataset `mine` that reads it."""
    (project / "data" / "own").mkdir(parents=True)
    reviews().to_csv(project / "data" / "own" / "reviews.csv", index=False)
    add_file_dataset(project)
    return project


SMALL = ["dataset=mine", "base.seeds=[0]", "gradient_flow.horizon=100"]


def test_a_file_dataset_added_by_params_alone_runs_through_every_stage(own_project):
    for stage in (prepare, one_step, gradient_flow, evaluate):
        assert stage.main(SMALL) == 0, stage.__name__
    results = own_project / "results"
    metrics = json.loads((results / "prepare" / "mine" / "metrics.json").read_text())["seed0"]
    assert (metrics["n_train"], metrics["n_test"]) == (24, 6)  # data.test_fraction 0.2 of the 30 rows
    assert metrics["bootstrap"] == 1 and metrics["distinct_train_rows"] < 24  # the seed's resample of the 24
    summary = (results / "evaluate" / "mine" / "summary.md").read_text()
    assert "| `lemma41_linear` Lemma 4.1:" in summary and "| `lemma42_growth` Lemma 4.2:" in summary
    slope = json.loads((results / "one_step" / "mine" / "seed0" / "metrics.json").read_text())["slope"]
    assert slope > 0  # E1^T v rises with alpha_s: the file's sentiment words moved as the lemma says
    top = json.dumps(json.loads((results / "evaluate" / "mine" / "top_tokens.json").read_text()))
    assert any(word in top for word in GOOD + BAD)
    record = json.loads((own_project / "runs" / "one_step" / "mine.json").read_text())["runs"][0]
    assert record["inputs"][0]["name"] == "mine" and record["inputs"][0]["source"] == "data/own/reviews.csv"


def test_each_seed_resamples_a_split_used_whole_and_a_subsample_of_every_row_says_so(own_project, recwarn):
    """A dataset used whole (or a subsample that takes every row, here max_train 2,175 of 24 rows): every draw would
    hold the same rows, so each seed trains on its own bootstrap resample; the test split stays whole. Without
    bootstrap, one draw that every seed reads."""
    assert prepare.main(["dataset=mine", "base.seeds=[0,1]", "data.max_train=2175"]) == 0
    assert any("data.max_train = 2,175 takes every one of the 24 rows of the train split" in str(warning.message)
               for warning in recwarn)
    folder = own_project / "data" / "processed" / "mine"
    from toksel.data.corpus import PackedSplit

    first, second = (PackedSplit.load(folder / f"seed{seed}" / "train.npz") for seed in (0, 1))
    assert first.n == second.n == 24 and not np.array_equal(first.bag_tokens, second.bag_tokens)
    assert (folder / "seed0" / "test.npz").read_bytes() == (folder / "seed1" / "test.npz").read_bytes()
    assert prepare.main(["dataset=mine", "base.seeds=[0,1]", "data.bootstrap=false"]) == 0
    assert json.loads((folder / "draws.json").read_text()) == {"0": "all", "1": "all"}


def test_the_mlflow_input_follows_the_files_content(own_project):
    naming = RunNaming("one_step", per_dataset=True, variant=None)

    def dataset_input() -> dict:
        return naming.record(load_config(["dataset=mine"]), ("data",), False, True, []).inputs[0]

    first = dataset_input()
    reviews(32).to_csv(own_project / "data" / "own" / "reviews.csv", index=False)
    second = dataset_input()
    assert first["source"] == second["source"] == "data/own/reviews.csv" and first["digest"] != second["digest"]
    add_file_dataset(own_project, test_path="data/own/test.jsonl")
    assert dataset_input()["source"] == "data/own/reviews.csv, data/own/test.jsonl"


WRITERS = {
    "csv": lambda frame, path: frame.to_csv(path, index=False),
    "jsonl": lambda frame, path: frame.to_json(path, orient="records", lines=True),
    "json": lambda frame, path: frame.to_json(path, orient="records"),  # one array of objects
    "parquet": lambda frame, path: frame.to_parquet(path),
}


def _splits(project, **data):
    add_file_dataset(project, **data)
    return load_text_splits("mine", load_config(["dataset=mine"]).data)


def test_every_format_gives_the_same_fixed_split_of_one_file(project):
    (project / "data" / "own").mkdir(parents=True)
    frame = reviews(40).assign(review=lambda f: f.review.where(f.index != 5, "NA"))  # a text "NA" stays text
    splits = {}
    for extension, write in WRITERS.items():
        write(frame, project / "data" / "own" / f"reviews.{extension}")
        splits[extension] = _splits(project, path=f"data/own/reviews.{extension}", test_fraction=0.25)
    first = splits["csv"]
    assert len(first["test"].texts) == 10 and len(first["train"].texts) == 30
    assert sorted(first["train"].texts + first["test"].texts) == sorted(frame.review)  # disjoint, every row
    assert "NA" in first["train"].texts + first["test"].texts
    for split in splits.values():
        for name in ("train", "test"):
            assert split[name].texts == first[name].texts and split[name].labels.tolist() == first[name].labels.tolist()
    again = _splits(project, path="data/own/reviews.csv", test_fraction=0.25)
    assert again["test"].texts == first["test"].texts  # the same rows every run


def test_a_test_file_is_the_test_split_and_labels_renumber_the_source_classes(project):
    (project / "data" / "own").mkdir(parents=True)
    stars = pd.DataFrame({"review": [f"review {i}" for i in range(10)], "stars": [1, 2, 3, 4, 5, 5, 4, 3, 2, 1]})
    stars.to_csv(project / "data" / "own" / "reviews.csv", index=False)
    stars.iloc[:5].to_parquet(project / "data" / "own" / "test.parquet")
    splits = _splits(project, test_path="data/own/test.parquet", labels=[1, 2, 4, 5], num_classes=4)
    assert splits["train"].texts == [f"review {i}" for i in (0, 1, 3, 4, 5, 6, 8, 9)]  # 3 stars left out
    assert splits["train"].labels.tolist() == [0, 1, 2, 3, 3, 2, 1, 0]
    assert splits["test"].texts == ["review 0", "review 1", "review 3", "review 4"]


def _write(project, name: str, content: str | bytes) -> None:
    path = project / "data" / "own" / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())


BAD_INPUT = {
    "a missing file": ({"path": "data/own/nosuch.csv"}, None, "data file data/own/nosuch.csv is missing"),
    "an unknown extension": ({"path": "data/own/reviews.txt"}, None,
                             "data.path = 'data/own/reviews.txt': the format comes from the extension"),
    "a path out of the project": ({"path": "../reviews.csv"}, None, "must lie in the project's data/own/ folder"),
    "an absolute path": ({"path": "/tmp/reviews.csv"}, None, "must lie in the project's data/own/ folder"),
    "a path out of data/own": ({"path": "data/own/../reviews.csv"}, None, "must lie in the project's data/own/"),
    "no path": ({"path": ""}, None, "data.path is empty: a file dataset needs its file"),
    "a test file of another format": ({"test_path": "data/own/test.xlsx"}, None, "data.test_path = "),
    "a missing column": ({"label_column": "rating"}, None,
                         "mine (data/own/reviews.csv) has no column rating (it has review, stars, extra)"),
    "a label out of range": ({}, ("reviews.csv", "review,stars\ngood,1\nbad,0\nmeh,2\n"),
                             "mine (data/own/reviews.csv): labels [2] lie outside 0 .. 1"),
    "a label not an integer": ({}, ("reviews.csv", "review,stars\ngood,pos\nbad,neg\n"),
                               "labels in column 'stars' are str, not integers"),
    "a label with a fraction": ({}, ("reviews.csv", "review,stars\ngood,1.5\nbad,0\n"),
                                "labels in column 'stars' are float64, not integers"),
    "a JSON label written as text": ({"path": "data/own/r.jsonl"}, ("r.jsonl", '{"review": "a", "stars": "1"}\n'),
                                     "labels in column 'stars' are str, not integers"),
    "an empty file": ({}, ("reviews.csv", ""),
                      "data file data/own/reviews.csv is not a readable csv file (it is empty)"),
    "a header alone": ({}, ("reviews.csv", "review,stars\n"), "mine (data/own/reviews.csv) is empty"),
    "a cut JSON Lines file": ({"path": "data/own/r.jsonl"}, ("r.jsonl", '{"review": "a", "stars": 1}\n{"revi'),
                              "data file data/own/r.jsonl is not a readable json file"),
    "a CSV not in UTF-8": ({}, ("reviews.csv", b"review,stars\ncaf\xe9,1\n"), "is not a readable csv file ('utf-8'"),
    "a Parquet file that is not": ({"path": "data/own/r.parquet"}, ("r.parquet", "review,stars\n"),
                                   "data file data/own/r.parquet is not a readable parquet file"),
    "too few rows to hold out a test split": ({}, ("reviews.csv", "review,stars\ngood,1\nbad,0\n"),
                                              "2 rows are too few to hold out data.test_fraction = 0.2"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_file_input_exits_2_with_one_line(own_project, capsys, case):
    data, file, message = BAD_INPUT[case]
    add_file_dataset(own_project, **data)
    if file:
        _write(own_project, *file)
    assert prepare.main(["dataset=mine"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("prepare: ") and message in error[0], error
    assert not (own_project / "data" / "processed").exists()


def test_a_link_out_of_data_own_is_refused(own_project, capsys, tmp_path):
    """data/own/reviews.csv a link to a file elsewhere: refused as `../reviews.csv` is, in one line."""
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("review,stars\nsecret,1\n")
    (own_project / "data" / "own" / "reviews.csv").unlink()
    (own_project / "data" / "own" / "reviews.csv").symlink_to(outside)
    assert prepare.main(["dataset=mine"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "is a link to a file outside data/own/" in error[0], error


def _move_out(folder, outside) -> None:
    """`folder` of the project moved to `outside` and left as a link to it."""
    folder.rename(outside)
    folder.symlink_to(outside, target_is_directory=True)


@pytest.mark.parametrize("linked", [("data", "own"), ("data",)], ids=["data/own", "data"])
def test_a_folder_on_the_way_that_links_out_of_the_project_is_refused(own_project, capsys, tmp_path_factory, linked):
    """data/own (or data) a link to a folder elsewhere: every link in data/own was refused, not the folder itself."""
    _move_out(own_project.joinpath(*linked), tmp_path_factory.mktemp("elsewhere") / linked[-1])
    for stage, module in (("check_params", check_params), ("prepare", prepare)):
        assert module.main(["dataset=mine"]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith(f"{stage}: "), error
        assert "data/own/ leads out of the project through a link (to " in error[0], error
    assert not (own_project / "data" / "processed").exists()


def test_a_link_to_a_folder_of_the_project_is_followed(own_project):
    _move_out(own_project / "data" / "own", own_project / "data" / "mine")
    assert check_params.main([]) == 0


def test_a_path_through_dot_dot_says_so(own_project, capsys, tmp_path_factory):
    """Through a link, `..` climbs from the link's target: it was refused as a link to a file outside data/own/."""
    _move_out(own_project / "data" / "own", own_project / "data" / "kept")  # the project's, so not refused for it
    (own_project / "data" / "kept" / "sub").symlink_to(tmp_path_factory.mktemp("elsewhere"))
    add_file_dataset(own_project, path="data/own/sub/../reviews.csv")
    assert check_params.main([]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "check_params: config error: datasets.mine.data.path = 'data/own/sub/../reviews.csv' goes up a folder with "
        "'..': write the path without it (data/own/reviews.csv)"]


def test_check_params_refuses_a_file_dataset_without_a_path(own_project, capsys):
    add_file_dataset(own_project, source="file", path="")
    assert check_params.main([]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["check_params: config error: datasets.mine.data.path is empty: a file dataset needs its file "
                     "(CSV, JSON Lines or Parquet under data/own/)"]


@pytest.mark.slow
def test_dvc_reruns_a_file_datasets_stages_when_its_file_changes_and_only_then(dvc_project):
    own = dvc_project / "data" / "own"
    assert (own / "README.md").exists()  # the folder check_params follows is part of the project
    reviews().to_csv(own / "reviews.csv", index=False)
    dvc(dvc_project, "add", "-q", "data/own/reviews.csv")  # as docs/datasets.md asks; repro re-adds an edit
    add_file_dataset(dvc_project)
    targets = ["prepare@mine", "prepare@synthetic"]
    assert sorted(stages_run(dvc(dvc_project, "repro", *targets))) == ["check_params", "prepare", "prepare@mine"]
    assert stages_run(dvc(dvc_project, "repro", *targets)) == []
    # Every prepare depends on the folder: a file there reruns them all, and the datasets that do not read it
    # prepare the same bytes, so nothing after their prepare would rerun.
    synthetic = dvc_project / "data" / "processed" / "synthetic"
    before = {path: path.read_bytes() for path in synthetic.rglob("*") if path.is_file()}
    (own / "notes.txt").write_text("a file no dataset reads\n")
    assert sorted(stages_run(dvc(dvc_project, "repro", *targets))) == ["check_params", "prepare", "prepare@mine"]
    assert {path: path.read_bytes() for path in synthetic.rglob("*") if path.is_file()} == before
    reviews(36).to_csv(own / "reviews.csv", index=False)
    assert sorted(stages_run(dvc(dvc_project, "repro", *targets))) == ["check_params", "prepare", "prepare@mine"]
    metrics = json.loads((dvc_project / "results" / "prepare" / "mine" / "metrics.json").read_text())["seed0"]
    assert metrics["n_train"] + metrics["n_test"] == 36


def test_the_repository_keeps_the_folder_of_own_files():
    assert (ROOT / "data" / "own" / "README.md").is_file()  # dvc.yaml's prepare stages depend on the folder


def test_the_report_names_a_file_dataset_by_its_file_and_digest(own_project):
    digest = hashlib.sha256((own_project / "data" / "own" / "reviews.csv").read_bytes()).hexdigest()
    row = dataset_rows({"mine": load_config(["dataset=mine"])})[0]
    assert row[:2] == ["mine", f"file data/own/reviews.csv (SHA-256 {digest[:12]})"]
