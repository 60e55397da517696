import dataclasses
import re
import subprocess
import sys
import typing

import pydantic
import pytest
import yaml
from omegaconf import OmegaConf

from pipelines import one_step, prepare
from tests.helpers import ROOT, dataset_entry
from toksel.params import Config
from toksel.runtime.config import load_config, params_hash
from toksel.runtime.errors import ToksError


def test_params_yaml_loads_with_its_defaults():
    config = load_config(path=ROOT / "params.yaml")
    assert config.data.synthetic.mode == "assumption1"
    assert config.model.d >= 512  # the Lemma 4.1 acceptance setting
    assert config.one_step.eta0 == 100.0


def test_overrides_are_typed():
    config = load_config(["one_step.eta0=50", "gradient_flow.max_margin=false", "model.d=64"], ROOT / "params.yaml")
    assert config.one_step.eta0 == 50.0 and isinstance(config.one_step.eta0, float)
    assert config.gradient_flow.max_margin is False
    assert config.model.d == 64


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("one_step.eta00=1", "unknown key 'one_step.eta00'"),
        ("bogus.key=1", "unknown key 'bogus'"),
        ("one_step.eta0=-1", "one_step.eta0 = -1 is out of range: must be > 0.0"),
        ("data.synthetic.delta=1.5", "data.synthetic.delta = 1.5 is out of range: must be <= 1.0"),
        ("model.d=0", "model.d = 0 is out of range: must be >= 1"),
        ("model.d=abc", "model.d"),
        ("gradient_flow.horizon=nan", "gradient_flow.horizon = nan must be a finite number"),
        ("data.synthetic.mode=paired", "data.synthetic.mode = 'paired' is not one of assumption1, independent"),
        ("data.synthetic.n_train=601", "data.synthetic.n_train and n_test must be even"),
        ("train.arms=[trained,frozen]", "'frozen'] must be a non-empty list of distinct arms of trained, untrained"),
        ("train.arms=[trained,trained]", "must be a non-empty list of distinct arms of trained, untrained, one_step"),
        ("eta0", "override 'eta0' is not of the form key=value"),
    ],
)
def test_bad_values_are_rejected_naming_the_key(override, message):
    with pytest.raises(ToksError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        load_config([override], ROOT / "params.yaml")


def test_params_hash_is_stable_and_sensitive():
    a = load_config(path=ROOT / "params.yaml").sections(["one_step"])
    b = load_config(["one_step.eta0=7"], ROOT / "params.yaml").sections(["one_step"])
    assert params_hash(a) == params_hash(dict(a)) and params_hash(a) != params_hash(b)


def test_stage_with_bad_override_exits_2_with_one_line_and_writes_nothing(project, capsys):
    assert prepare.main(["one_step.eta0=-3"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "prepare: config error: one_step.eta0 = -3 is out of range: must be > 0.0"
    assert not (project / "data").exists() and not (project / "mlflow.db").exists()


def test_stage_missing_its_input_exits_2_naming_the_stage_to_run(project, capsys):
    assert one_step.main([]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "run the prepare@synthetic stage first" in error[0]


def test_help_lists_the_stage_keys_with_their_values(project, capsys):
    assert one_step.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "one_step.eta0=100.0" in out and "model.d=1024" in out and "gradient_flow." not in out


def test_help_read_in_part_is_no_error():
    """`--help | head`: the reader closes the pipe before the stage writes; no traceback, exit 0."""
    helped = subprocess.Popen([sys.executable, "-m", "pipelines.one_step", "--help"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    helped.stdout.close()  # before the stage has imported what it needs and written a line
    assert helped.wait(timeout=120) == 0 and helped.stderr.read() == ""


def test_a_dataset_entry_completes_the_shared_sections_and_the_command_line_overrides_both():
    imdb = load_config(["dataset=imdb"], ROOT / "params.yaml")
    assert imdb.dataset == "imdb" and imdb.data.source == "hub" and imdb.model.d == 2048
    assert imdb.gradient_flow.max_margin is False and imdb.gradient_flow.agreement == 0.02  # its own, and shared
    assert load_config(["dataset=imdb", "model.d=64"], ROOT / "params.yaml").model.d == 64
    assert load_config(path=ROOT / "params.yaml").model.d == 1024  # synthetic's own


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (dataset_entry(data={"min_cont": 3}), "unknown key 'datasets.extra.data.min_cont'"),
        (dataset_entry(model={"d": -1}), "datasets.extra.model.d = -1 is out of range"),
        ({"data": {}, "model": {}}, "datasets.extra lacks the sections one_step, gradient_flow"),
        (dataset_entry(data={"source": "hub"}), "datasets.extra.data.hub_id is empty"),
        (dataset_entry(data={"source": "file"}), "datasets.extra.data.path is empty"),
        ({**dataset_entry(), "one_step": {}}, "datasets.extra.one_step.eta0 has no value"),
    ],
)
def test_every_dataset_entry_is_validated_even_when_another_runs(tmp_path, entry, message):
    params = OmegaConf.load(ROOT / "params.yaml")
    params.datasets.extra = entry
    OmegaConf.save(params, tmp_path / "params.yaml")
    with pytest.raises(ToksError, match=re.escape(message)):
        load_config([], tmp_path / "params.yaml")


RUN_KEYS = {"dataset", "seed"}  # chosen per run on the command line (dvc.yaml's cmd), not settings


def _schema_keys(cls, prefix=""):
    """Every leaf key of the schema, a section that may be absent (data.synthetic: Optional) opened too."""
    keys = set()
    for name, kind in typing.get_type_hints(cls).items():
        nested = next((arg for arg in (kind, *typing.get_args(kind)) if dataclasses.is_dataclass(arg)), None)
        keys |= _schema_keys(nested, f"{prefix}{name}.") if nested else {prefix + name}
    return keys


def _params_keys(tree, prefix=""):
    """Every leaf key params.yaml writes: the shared sections' and, for `datasets`, each entry's as if shared."""
    keys = set()
    for key, value in tree.items():
        if key == "datasets" and not prefix:
            keys.add(key)
            for entry in value.values():
                keys |= _params_keys(entry)
        elif isinstance(value, dict) and value:
            keys |= _params_keys(value, f"{prefix}{key}.")
        elif not isinstance(value, dict):
            keys.add(prefix + key)
    return keys


def _defaults_in_schema(cls, prefix=""):
    """Every value the schema itself holds: each field's default (a field without one is required)."""
    schema = pydantic.TypeAdapter(cls).json_schema()
    found = {prefix + name: spec.get("default") for name, spec in schema["properties"].items()
             if name not in schema.get("required", [])}
    for name, kind in typing.get_type_hints(cls).items():
        nested = next((arg for arg in (kind, *typing.get_args(kind)) if dataclasses.is_dataclass(arg)), None)
        found |= _defaults_in_schema(nested, f"{prefix}{name}.") if nested else {}
    return found


ABSENT = {"data.synthetic": None}  # a dataset of another source has no generator: absence, not a value


def test_every_default_has_one_home_params_yaml():
    """The schema holds types, bounds and help; a value written there as well as in params.yaml could disagree
    (as ablation.datasets once did): only the run keys, set per run, have a default in the code, and the
    generator's section is absent unless a dataset gives it."""
    defaults = _defaults_in_schema(Config)
    assert set(defaults) == RUN_KEYS | set(ABSENT) and all(defaults[key] is None for key in ABSENT)


def test_every_setting_lives_in_params_yaml_and_every_key_there_in_the_schema():
    """No setting hides as a dataclass default that DVC cannot see, and params.yaml holds nothing the schema lacks."""
    in_params = _params_keys(yaml.safe_load((ROOT / "params.yaml").read_text()))
    assert _schema_keys(Config) - RUN_KEYS == in_params
