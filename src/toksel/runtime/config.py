"""params.yaml + `key=value` overrides -> one validated config: OmegaConf reads and merges params.yaml, the chosen
dataset's entry and the overrides; pydantic checks the result against toksel/params.py, and its first complaint
becomes one line naming the full key."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pydantic
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from toksel.params import DATASET_SECTIONS, Config, name_problem
from toksel.runtime.errors import ToksError


def _check_interpolations(path: Path, params: Any) -> None:
    """Refuse `${...}` anywhere in the values: DVC compares the text, not what it resolves to, so a change behind it
    would rerun nothing; and `${oc.env:VAR}` would copy the environment (a password) into the settings and MLflow."""
    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict | list):
            for name, value in node.items() if isinstance(node, dict) else enumerate(node):
                walk(value, f"{key}.{name}".lstrip("."))
        elif isinstance(node, str) and "${" in node:
            raise ToksError(f"config error: {key} = {node!r} in {path} is an interpolation: write the value itself "
                            "(DVC sees the text, not what it resolves to; an environment variable would be copied "
                            "into the settings and MLflow)")
    walk(OmegaConf.to_container(params, resolve=False), "")


# How deep mappings and lists may nest. params.yaml's deepest value lies five levels down
# (datasets.<name>.data.synthetic.<key>) and the schema takes nothing deeper, so 16 refuses no setting; without a
# bound, PyYAML's scanner revisits every open level at each token (6,000 levels took 34 s) and its composer recurses
# once per level (2,000 overflowed the stack).
MAX_DEPTH = 16


def _check_structure(text: str, where: str, depth: int = 0, lines: bool = True) -> None:
    """Refuse any YAML alias and any nesting deeper than MAX_DEPTH (counting `depth` levels around `text`), found in
    the parser's events one at a time, before anything builds or expands them: params.yaml uses no alias, and a few
    dozen nested ones expand to gigabytes (a "billion laughs"). `where` names the text; `lines`: it has lines to
    point at."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        at = f" at line {event.start_mark.line + 1}" if lines else ""
        if isinstance(event, yaml.AliasEvent):
            raise ToksError(f"config error: {where} uses a YAML alias (*{event.anchor}){at}: write the values out")
        depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
        if depth > MAX_DEPTH:
            raise ToksError(f"config error: {where} nests mappings and lists more than {MAX_DEPTH} levels deep{at}: "
                            "no setting lies deeper than 5")


def _check_override(item: str) -> None:
    """An override is `key=value`, its value YAML within MAX_DEPTH levels (the key's own parts counted) and with no
    alias; the message shows the key alone, as the value may be long."""
    key, equals, value = item.partition("=")
    if not equals or not key:
        raise ToksError(f"config error: override {item[:80]!r} is not of the form key=value")
    where = f"the override {key[:80]}=..."
    try:
        _check_structure(value, where, depth=len(re.split(r"[.\[]", key)), lines=False)
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ToksError(f"config error: {where}: its value is not valid YAML: {problem}") from None


def _read_params(path: Path, text: str | None = None) -> tuple[Any, str]:
    """params.yaml (or `text`, a version of it) as an OmegaConf node, and the digest of its values (comments and
    layout aside, as DVC records them); one line for a file that is not UTF-8, not YAML, repeats a key or is a list."""
    try:
        text = path.read_bytes().decode("utf-8") if text is None else text
        _check_structure(text, str(path))
        params = OmegaConf.load(io.StringIO(text))
    except UnicodeDecodeError as error:
        raise ToksError(f"config error: {path} is not UTF-8 text (byte {error.start})") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ToksError(f"config error: {path} is not valid YAML{at}: {problem}") from None
    except OmegaConfBaseException as error:
        raise ToksError(f"config error: {path}: {str(error).splitlines()[0]}") from None
    if not isinstance(params, DictConfig):
        raise ToksError(f"config error: {path} must be a mapping of sections, not a list")
    _check_interpolations(path, params)
    values = json.dumps(OmegaConf.to_container(params, resolve=False), sort_keys=True, default=str)
    return params, hashlib.sha256(values.encode()).hexdigest()


def params_values(path: Path | str = "params.yaml", text: str | None = None) -> dict[str, Any]:
    """The values `path` (or `text`, another version of it) holds, read as read_config reads them."""
    return OmegaConf.to_container(_read_params(Path(path), text)[0], resolve=False)


def params_digest(path: Path | str = "params.yaml") -> str:
    """The digest of the values `path` holds now."""
    return _read_params(Path(path))[1]


@functools.cache
def _schema() -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(Config)


RANGES = {"greater_than": ">", "greater_than_equal": ">=", "less_than_equal": "<="}  # pydantic's error types


def _complaint(error: pydantic.ValidationError, shown: Any) -> str:
    """pydantic's first complaint as one line naming the key as `shown` writes it (where params.yaml holds it)."""
    first = error.errors()[0]
    kind, value, context = first["type"], first["input"], first.get("ctx") or {}
    key = shown(".".join(str(part) for part in first["loc"]))
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"unknown key {key!r} (check the spelling against params.yaml)"
    if kind == "missing":
        return f"{key} has no value: params.yaml holds every setting (the code has no defaults), so add it there"
    if kind in RANGES:
        return f"{key} = {value} is out of range: must be {RANGES[kind]} {next(iter(context.values()))}"
    if kind == "finite_number":
        return f"{key} = {value} must be a finite number"
    if kind == "value_error":  # a rule of the schema that ties keys together: it names them
        return shown("") + str(context["error"])
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", context["expected"])  # pydantic's "'a' or 'b'"
        return f"{key} = {value!r} is not one of {', '.join(choices)}"
    return f"{key}: {first['msg']}"


def _resolve(layers: list[Any], prefix: str = "", dataset: str | None = None) -> Config:
    """Merge the layers (the shared sections, a dataset's entry, the command line) and validate them; an error names
    the key after `prefix`, as datasets.<dataset>.<key> where that entry holds (or lacks) what the command line
    does not replace."""
    try:
        merged = OmegaConf.to_container(OmegaConf.merge(*layers), resolve=False)
    except OmegaConfBaseException as error:
        raise ToksError(f"config error: {prefix}{str(error).splitlines()[0]}") from None
    entry, later = (layers[1], layers[2:]) if dataset and len(layers) > 1 else (None, [])

    def shown(key: str) -> str:
        replaced = any(OmegaConf.select(layer, key, default=None) is not None for layer in later)
        own = entry is not None and key.split(".")[0] in DATASET_SECTIONS and not replaced and (
            OmegaConf.select(entry, key, default=None) is not None or OmegaConf.select(layers[0], key) is None)
        return f"{prefix}datasets.{dataset}.{key}" if own else f"{prefix}{key}"

    try:
        config = _schema().validate_python(merged)
    except pydantic.ValidationError as error:
        raise ToksError(f"config error: {_complaint(error, shown)}") from None
    return config


def _dataset_layer(datasets: Any, name: str) -> Any:
    """The sections a dataset's entry overrides; each entry lists all of DATASET_SECTIONS ({} for none)."""
    if name not in datasets:
        known = ", ".join(datasets) or "none"
        raise ToksError(f"config error: unknown dataset {name!r}: params.yaml defines {known}")
    entry = datasets[name]
    missing = [section for section in DATASET_SECTIONS if entry is None or section not in entry]
    if missing:
        raise ToksError(f"config error: datasets.{name} lacks the sections {', '.join(missing)} (use {{}} for "
                        "no overrides: dvc.yaml tracks each of them)")
    return OmegaConf.create({section: entry[section] or {} for section in DATASET_SECTIONS})


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    config: Config
    params_path: Path  # the params file it was made from
    params_digest: str  # of the values in that file


def load_config(overrides: Sequence[str] = (), path: Path | str = "params.yaml") -> Config:
    """`path` with the chosen dataset's entry, then the `key=value` overrides, validated (every other entry too, so
    that a typo anywhere is caught on the first run); a ToksError names the offending key."""
    return read_config(overrides, path).config


def dataset_configs(names: Iterable[str], overrides: Sequence[str] = ()) -> dict[str, Config]:
    """Each dataset's config as its stages read it, with the `overrides` of a command line."""
    return {name: load_config([*overrides, f"dataset={name}"]) for name in names}


def read_config(overrides: Sequence[str] = (), path: Path | str = "params.yaml") -> ReadConfig:
    """load_config, with the digest of what it read: a stage checks at its end that the file still holds it."""
    path = Path(path)
    if not path.exists():
        raise ToksError(f"config error: {path} not found: run from the project root")
    for item in overrides:
        _check_override(item)
    params, digest = _read_params(path)
    try:
        command_line = OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as error:
        raise ToksError(f"config error: the overrides {' '.join(overrides)}: {str(error).splitlines()[0]}") from None
    # Which dataset, and the entries (the command line may change them too): each entry completes the shared
    # sections with its own values, so no config is whole before one is applied.
    try:
        chosen = OmegaConf.merge(params, command_line)
        datasets, name = chosen.get("datasets"), chosen.get("dataset", Config.dataset)
    except OmegaConfBaseException as error:
        raise ToksError(f"config error: {str(error).splitlines()[0]}") from None
    if not isinstance(datasets, DictConfig) or not datasets:
        raise ToksError(f"config error: {path} has no `datasets` mapping: each dataset is an entry there")
    if not isinstance(name, str):
        raise ToksError(f"config error: dataset = {name!r} must name an entry of datasets")
    _check_no_dead_values(params, datasets, path)
    # Every section but the dataset entries, which each entry's own layer stands in for.
    shared = OmegaConf.merge(OmegaConf.masked_copy(params, [key for key in params if key != "datasets"]),
                             {"datasets": {}})
    for entry in (name, *datasets):  # names first: each stands in a folder and a command line
        if problem := name_problem(entry, "dataset key"):
            raise ToksError(f"config error: {problem}")
    layer = _dataset_layer(datasets, name)
    if OmegaConf.select(layer, "data.synthetic") is None and OmegaConf.select(command_line, "data.synthetic"):
        command_line.data.pop("synthetic")  # the generator's values (a test's tiny sizes): synthetic datasets' only
    config = _resolve([params, layer, command_line], dataset=name)  # the run's own first
    for entry in datasets:  # the run's own entry, as the file has it, was checked just now
        if entry != name or set(command_line) - {"dataset", "seed"}:
            _resolve([shared, _dataset_layer(datasets, entry)], prefix=f"datasets.{entry}.")
    return ReadConfig(config, path, digest)


def _check_no_dead_values(params: Any, datasets: Any, path: Path) -> None:
    """A shared value that every dataset's entry sets too would change nothing (`-S one_step.eta0=50` once did
    nothing): refused, naming where the value lives."""
    def leaves(node: Any, key: str) -> Iterator[str]:
        if isinstance(node, DictConfig) and len(node):
            for name in node:
                yield from leaves(node[name], f"{key}.{name}")
        else:
            yield key

    for section in DATASET_SECTIONS:
        for key in leaves(params.get(section), section) if section in params else []:
            if all(OmegaConf.select(entry, key, default="<absent>") != "<absent>" for entry in datasets.values()):
                raise ToksError(f"config error: {key} in {path} is every dataset's own: set "
                                f"datasets.<name>.{key} (datasets: {', '.join(datasets)})")


def describe(config: Config, sections: Iterable[str]) -> list[str]:
    """One line per key of `sections`: its current value and what it means (for --help)."""
    lines = []

    def line(owner: Any, name: str, key: str) -> None:
        value = getattr(owner, name)
        if dataclasses.is_dataclass(value):
            for spec in dataclasses.fields(value):
                line(value, spec.name, f"{key}.{spec.name}")
            return
        help = _descriptions(type(owner)).get(name, "")
        lines.append(f"  {f'{key}={value}':<44} {help}".rstrip())

    for name in sections:
        section, _, key = name.partition(".")
        line(getattr(config, section) if key else config, key or section, name)
    return lines


@functools.cache
def _descriptions(section: type) -> dict[str, str]:
    return {name: spec.get("description", "")
            for name, spec in pydantic.TypeAdapter(section).json_schema()["properties"].items()}


def params_hash(sections: dict[str, Any]) -> str:
    """A short, stable fingerprint of a stage's resolved parameters."""
    return hashlib.sha256(json.dumps(sections, sort_keys=True).encode()).hexdigest()[:12]
