"""The ledger of every rule in force: for each claim of the catalogue and each part of the rule that judges it,
its value now, the commit from which it has held, what it was before, and whether results existed then.

A claim's rule is what decides its verdict, not its wording: every field of `Claim` but the wording ones (WORDING;
a field added later is followed without a change here), the value in params.yaml of the key its `threshold` names,
and the value of each params.yaml key its `settings` name, with every dataset's override of it. Nothing here is
written by hand: the history is git's. The commits that touched params.yaml or the claims module (src/toksel/
claims.py with verdict.py before the claims package, src/toksel/claims/ after) are read oldest first, each
commit's params.yaml with yaml and its claims module imported from that commit's own files in a separate process
(never the package this module belongs to); the working tree comes last ("uncommitted") when it differs from HEAD.
A field a commit's `Claim` lacked takes the current field's default, as that code behaved; a claim a commit lacked,
or a commit before the registry, is "absent".

For each (claim, component): `set_in` is the first commit of the final unbroken run of its current value, and its
status is "changed after the data" when the numbers the rule judges were already in the repository's results at that
commit's parent: a tracked file under results/ named the claim, or the metric its statistic reads (whole words), or
a pilot set it (pilots.py: numbers seen that results/ does not hold); else "fixed before the data". A params.yaml
value is followed through the whole history of params.yaml, before the claims registry too (the key the claim names
now, where a commit's claim named none). The one exception is the registry's own first commit: the rules it wrote
down existed before it in other code, so there only the claim's own id counts as its results. Without a git history
(no repository, a shallow clone) the ledger says so and holds no records: a claim it does not list is unknown, not
fixed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from toksel.claims.catalogue import CLAIMS, Claim
from toksel.claims.pilots import CODED, PILOTS, Coded, Pilot

# The fields that word a claim or name where it is measured; every other field of Claim is part of its rule.
WORDING = frozenset({"id", "source", "statement", "paper", "measures", "control", "bug", "producer", "family",
                     "origin", "control_statistic",
                     "settings"})  # the keys whose values are followed: each value is a component of its own
PARAMS = "params.yaml"
PACKAGE = "src/toksel/claims"  # the claims package (from commit 9c8f82e on): catalogue.py, verdict.py, ...
OLD_MODULES = ("src/toksel/claims.py", "src/toksel/verdict.py")  # the claims module before the package
HISTORY_PATHS = (PARAMS, *OLD_MODULES, f"{PACKAGE}/catalogue.py", f"{PACKAGE}/verdict.py")
RESULTS = "results/"
SHORT_HASH = 7  # a commit's short name: git's own length grows with the objects a clone holds, and the ledger
# and docs/verdicts.md would then differ between clones (git still lengthens a name that would be ambiguous)

THRESHOLD_VALUE = "threshold_value"
UNCOMMITTED = "uncommitted"
ABSENT = "absent"  # the claim (or the whole registry) did not exist at that commit
UNREADABLE = "unreadable"  # that commit's claims module or params.yaml could not be read
NOT_SET = "not in params.yaml"
FIXED = "fixed before the data"
CHANGED = "changed after the data"
SUBJECT_CHARS = 200
NO_HISTORY = "history unavailable"


@dataclass(frozen=True)
class Ledger:
    """The records (one per claim and component) and what the history was read at."""

    head: str  # HEAD as "<short hash> <subject>", and whether the working tree differs; "" without a history
    records: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    available: bool = True

    def as_json(self) -> dict[str, Any]:
        """What the report reads; without HEAD, so that a commit that changes no rule changes nothing here."""
        return {"available": self.available, "warnings": self.warnings, "records": self.records}


@dataclass(frozen=True)
class Snapshot:
    """One point of the history: a commit, or the working tree."""

    label: str  # the full hash, or UNCOMMITTED
    short: str
    subject: str
    parent: str  # where results are looked for: the commit's first parent ("" for a root commit); HEAD for the tree
    params: Any  # params.yaml parsed; None where there was none; UNREADABLE
    claims: dict[str, dict[str, Any]] | str | None  # id -> its fields; None before the registry; UNREADABLE


def build_ledger(root: Path | str = ".", claims: Sequence[Claim] = CLAIMS,
                 pilots: Sequence[Pilot] = PILOTS, coded: Sequence[Coded] = CODED) -> Ledger:
    """The ledger of `claims` (the current catalogue) from the git history of the project at `root`, with the
    components `pilots` set after numbers results/ does not hold."""
    root = Path(root).resolve()
    missing = _history_missing(root)
    if missing:
        return Ledger("", [], [f"ledger: {NO_HISTORY}: {missing}"], available=False)
    warnings: list[str] = []
    snapshots = _snapshots(root, warnings)
    comments = key_comments(_read_text(root / PARAMS))
    records = [record for claim in claims for record in _claim_records(claim, snapshots, comments, coded)]
    _mark_results(root, records)
    _mark_pilots(records, {claim.id: claim.threshold for claim in claims}, pilots)
    return Ledger(_head_line(root, snapshots), records, warnings)


def ledger_records(root: Path | str = ".", claims: Sequence[Claim] = CLAIMS) -> list[dict[str, Any]]:
    """The whole ledger as JSON-serialisable records."""
    return build_ledger(root, claims).records


def per_claim_status(records: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Each claim of the records -> its components changed after the data ([]: the claim's rule was fixed before
    the data). A claim without records (no history) is not in it: unknown."""
    status: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        changed = status.setdefault(record["claim"], [])
        if record["status"] == CHANGED:
            changed.append(record)
    return status


# --- git -------------------------------------------------------------------------------------------------------

def _git(root: Path, *args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], input=stdin, capture_output=True, check=check)


def _history_missing(root: Path) -> str:
    """Why the history cannot be read ("" when it can): no git, no repository at `root`, no commit, a shallow
    clone (its oldest commits would pass for the first ones)."""
    try:
        top = _git(root, "rev-parse", "--show-toplevel", check=False)
        if top.returncode != 0 or Path(top.stdout.decode().strip()).resolve() != root:
            return f"{root} is not the top of a git repository"
        if _git(root, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
            return "the repository has no commit"
        if _git(root, "rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true":
            return "a shallow clone: its first commits are not the project's"
    except FileNotFoundError:
        return "git is not installed"
    return ""


def _commits(root: Path) -> list[tuple[str, str, str, str]]:
    """(hash, short hash, first parent, subject) of the commits that touched HISTORY_PATHS, oldest first."""
    out = _git(root, "log", "--reverse", f"--abbrev={SHORT_HASH}", "--format=%H%x1f%h%x1f%P%x1f%B%x1e", "--",
               *HISTORY_PATHS)
    commits = []
    for entry in out.stdout.decode(errors="replace").split("\x1e"):
        if entry.strip():
            full, short, parents, message = entry.strip("\n").split("\x1f", 3)
            commits.append((full, short, parents.split(" ")[0], _subject(message)))
    return commits


def _subject(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0].strip()[:SUBJECT_CHARS] if lines else ""


def _cat_batch(root: Path, names: Sequence[str]) -> list[tuple[str, str, bytes] | None]:
    """`git cat-file --batch` for each object name: (sha, type, content), or None where it does not exist."""
    if not names:
        return []
    out = _git(root, "cat-file", "--batch", stdin="".join(f"{name}\n" for name in names).encode()).stdout
    objects, at = [], 0
    for _ in names:
        end = out.index(b"\n", at)
        header = out[at:end].decode().split(" ")
        if len(header) != 3:  # "<name> missing" (or ambiguous)
            objects.append(None)
            at = end + 1
            continue
        size = int(header[2])
        objects.append((header[0], header[1], out[end + 1:end + 1 + size]))
        at = end + 1 + size + 1
    return objects


def _tree_files(tree: bytes, hash_bytes: int) -> dict[str, str]:
    """A raw tree object's files: name -> blob sha (entries are `<mode> <name>\\0<binary sha>`)."""
    files, at = {}, 0
    while at < len(tree):
        space, nul = tree.index(b" ", at), tree.index(b"\0", at)
        mode, name = tree[at:space], tree[space + 1:nul].decode(errors="replace")
        if not mode.startswith(b"4"):  # 40000: a folder
            files[name] = tree[nul + 1:nul + 1 + hash_bytes].hex()
        at = nul + 1 + hash_bytes
    return files


# --- the snapshots -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Module:
    """A claims module as it was: the files of a package to write out, and the module that holds CLAIMS."""

    files: tuple[tuple[str, str], ...]  # (path inside the package folder, text)
    name: str

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self.files]).encode()).hexdigest()


def _module_of(sources: Mapping[str, str | None], package: Mapping[str, str]) -> _Module | None:
    """The claims module from its files: the claims package's .py files (`package`: name -> text), or the old
    claims.py and verdict.py (`sources`: repository path -> text or None); None before the registry."""
    if "catalogue.py" in package:
        files = {"toksel/__init__.py": "", "toksel/claims/__init__.py": ""}
        files |= {f"toksel/claims/{name}": text for name, text in package.items()
                  if name.endswith(".py") and name != "__init__.py"}
        return _Module(tuple(sorted(files.items())), "toksel.claims.catalogue")
    if sources.get(OLD_MODULES[0]) is not None:
        files = {"toksel/__init__.py": ""}
        files |= {path.removeprefix("src/"): text for path, text in sources.items() if text is not None}
        return _Module(tuple(sorted(files.items())), "toksel.claims")
    return None


class _Point(NamedTuple):
    """A point of the history as read from git (or the disk), before its claims module is loaded."""

    label: str
    short: str
    parent: str
    subject: str
    params: str | None  # params.yaml's text
    module: _Module | None


def _history(root: Path) -> list[_Point]:
    """Every commit that touched params.yaml or the claims module, oldest first, with its params.yaml and claims
    module (two `git cat-file --batch`: the files and the claims package's folder, then that folder's modules),
    then the working tree where it differs from HEAD."""
    commits = _commits(root)
    hash_bytes = len(commits[0][0]) // 2 if commits else 20
    objects = _cat_batch(root, [f"{full}:{path}" for full, *_ in commits for path in (PARAMS, *OLD_MODULES, PACKAGE)])
    trees = {i: _tree_files(obj[2], hash_bytes) for i, obj in enumerate(objects) if obj and obj[1] == "tree"}
    blobs = sorted({sha for files in trees.values() for name, sha in files.items() if name.endswith(".py")})
    texts = dict(zip(blobs, (obj[2].decode(errors="replace") for obj in _cat_batch(root, blobs)), strict=True))

    points = []
    for n, (full, short, parent, subject) in enumerate(commits):
        params, *old, _ = (obj[2].decode(errors="replace") if obj else None for obj in objects[n * 4:n * 4 + 4])
        package = {name: texts[sha] for name, sha in trees.get(n * 4 + 3, {}).items() if sha in texts}
        module = _module_of(dict(zip(OLD_MODULES, old, strict=True)), package)
        points.append(_Point(full, short, parent, subject, params, module))
    if _git(root, "diff", "--quiet", "HEAD", "--", *HISTORY_PATHS, check=False).returncode != 0:
        head = _git(root, "rev-parse", "HEAD").stdout.decode().strip()
        points.append(_Point(UNCOMMITTED, UNCOMMITTED, head, "not committed yet", _disk_text(root / PARAMS),
                             _disk_module(root)))
    return points


def _snapshots(root: Path, warnings: list[str]) -> list[Snapshot]:
    """The history's points with params.yaml parsed and the claims' fields loaded (each distinct file once)."""
    points = _history(root)
    loaded = _load_claims([point.module for point in points if point.module is not None])
    parsed: dict[str, Any] = {}
    snapshots = []
    for point in points:
        claims = None if point.module is None else loaded[point.module.key].get("claims", UNREADABLE)
        if claims == UNREADABLE:
            warnings.append(f"ledger: the claims module of {point.short} cannot be loaded "
                            f"({loaded[point.module.key]['error']}): its claims' catalogue fields are unreadable there")
        if point.params is not None and point.params not in parsed:
            parsed[point.params] = _parse_params(point.params)
            if parsed[point.params] == UNREADABLE:
                warnings.append(f"ledger: the params.yaml of {point.short} is not valid YAML")
        params = None if point.params is None else parsed[point.params]
        snapshots.append(Snapshot(point.label, point.short, point.subject, point.parent, params, claims))
    return snapshots


def _read_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _disk_text(path: Path) -> str | None:
    return path.read_text(errors="replace") if path.is_file() else None


def _disk_module(root: Path) -> _Module | None:
    """The working tree's claims module, from the files on disk (as a commit's: the same loader for both)."""
    package = {path.name: path.read_text(errors="replace") for path in sorted((root / PACKAGE).glob("*.py"))}
    return _module_of({path: _disk_text(root / path) for path in OLD_MODULES}, package)


def _parse_params(text: str) -> Any:
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # safe_load, in C where built
    except yaml.YAMLError:
        return UNREADABLE


def _plain(value: Any) -> Any:
    """A value as the loader prints it: JSON's types, a Statistic as its (runs, metric, combine)."""
    if type(value).__name__ == "Statistic":
        return {"runs": list(value.runs), "metric": value.metric, "combine": value.combine}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {spec.name: _plain(getattr(value, spec.name)) for spec in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value if value is None or isinstance(value, bool | int | float | str) else repr(value)


# Run in a separate interpreter over every version at once: each version's package is put first on sys.path, the
# toksel modules of the previous one forgotten, and CLAIMS printed as plain values (_plain, the same function), so
# that no historical code runs in the caller's process and their imports cost one start-up.
LOADER = ("from __future__ import annotations\nimport dataclasses, importlib, json, sys\n" + inspect.getsource(_plain)
          + r"""
out = []
for folder, name in json.load(sys.stdin):
    for loaded in [key for key in sys.modules if key == "toksel" or key.startswith("toksel.")]:
        del sys.modules[loaded]
    sys.path.insert(0, folder)
    try:
        module = importlib.import_module(name)
        if not module.__file__.startswith(folder):
            raise ImportError(f"{name} came from {module.__file__}")
        out.append({"claims": {claim.id: {f.name: _plain(getattr(claim, f.name)) for f in dataclasses.fields(claim)}
                               for claim in module.CLAIMS}})
    except BaseException as error:
        out.append({"error": f"{type(error).__name__}: {error}"})
    finally:
        sys.path.remove(folder)
with open(sys.argv[1], "w") as answer:  # not stdout, where a module may print as it loads
    json.dump(out, answer)
""")


def _load_claims(modules: Sequence[_Module]) -> dict[str, dict[str, Any]]:
    """Each distinct module (by its files) -> {"claims": id -> field -> plain value} or {"error": why not}."""
    distinct = {module.key: module for module in modules}
    if not distinct:
        return {}
    with tempfile.TemporaryDirectory(prefix="toksel-ledger-") as temp:
        jobs = []
        for n, module in enumerate(distinct.values()):
            folder = Path(temp, f"v{n}")
            for path, text in module.files:
                (folder / path).parent.mkdir(parents=True, exist_ok=True)
                (folder / path).write_text(text)
            jobs.append((str(folder), module.name))
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTHONPATH", None)  # the versions' folders alone come first
        answer = Path(temp, "claims.json")
        try:
            subprocess.run([sys.executable, "-c", LOADER, str(answer)], input=json.dumps(jobs), capture_output=True,
                           text=True, cwd=temp, env=env, timeout=300, check=True)
            results = json.loads(answer.read_text())
        except (subprocess.SubprocessError, ValueError, OSError) as error:
            results = [{"error": f"the loader failed: {type(error).__name__}"}] * len(distinct)
    return dict(zip(distinct, results, strict=True))


# --- components and their history ---------------------------------------------------------------------------------

def rule_fields(claim: Claim) -> list[dataclasses.Field]:
    """The fields of the claim's class that are part of its rule, in their order."""
    return [spec for spec in dataclasses.fields(claim) if spec.name not in WORDING]


def _default(spec: dataclasses.Field) -> Any:
    """A field's value where a commit's Claim lacked it: its default now (how that code behaved), else absent."""
    if spec.default is not dataclasses.MISSING:
        return _plain(spec.default)
    if spec.default_factory is not dataclasses.MISSING:
        return _plain(spec.default_factory())
    return ABSENT


def lookup(params: Any, key: str) -> Any:
    """The value of a dotted key in parsed params.yaml (NOT_SET where it has none; UNREADABLE passed on)."""
    if params == UNREADABLE:
        return UNREADABLE
    node = params
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return NOT_SET
        node = node[part]
    return _plain(node)


def _setting_keys(key: str, snapshots: Sequence[Snapshot]) -> list[str]:
    """A setting's key, or, where any snapshot's dataset entry sets it, every dataset's (datasets.<name>.<key>)."""
    if key.startswith("datasets."):
        return [key]
    names: dict[str, None] = {}
    own = False
    for snapshot in snapshots:
        datasets = snapshot.params.get("datasets") if isinstance(snapshot.params, dict) else None
        for name in datasets if isinstance(datasets, dict) else ():
            names[str(name)] = None
            own = own or lookup(snapshot.params, f"datasets.{name}.{key}") not in (NOT_SET, UNREADABLE)
    return [f"datasets.{name}.{key}" for name in names] if own else [key]


def effective(params: Any, key: str) -> Any:
    """The value a dataset's stages read: datasets.<name>.<key> as its entry sets it, else the shared <key> (NOT_SET
    where that dataset has no entry, though others do). A value moved between the two is the same rule."""
    parts = key.split(".")
    if parts[0] != "datasets" or len(parts) < 3:
        return lookup(params, key)
    if lookup(params, "datasets") is NOT_SET:  # before there were entries, the one set of values was every run's
        return lookup(params, ".".join(parts[2:]))
    if lookup(params, ".".join(parts[:2])) in (NOT_SET, UNREADABLE):
        return lookup(params, ".".join(parts[:2]))
    own = lookup(params, key)
    return own if own is not NOT_SET else lookup(params, ".".join(parts[2:]))


Reader = Callable[[Snapshot], Any]


def _components(claim: Claim, snapshots: Sequence[Snapshot], comments: Mapping[str, str],
                coded: Sequence[Coded] = ()) -> list[tuple[str, Reader, str]]:
    """The claim's rule components: each with how to read its value at a snapshot, and why it is what it is now
    (params.yaml's comment on a key; the claim's `measures` for its statistic). A field left unset where `coded`
    says code held its value reads that value, from the commit that set it in code."""
    def position(commit: str) -> int:  # a commit's place in the history by its short hash; past the end if absent
        return next((at for at, snapshot in enumerate(snapshots) if snapshot.short and commit
                     and (snapshot.short.startswith(commit) or commit.startswith(snapshot.short))), len(snapshots))

    order = {snapshot.short: at for at, snapshot in enumerate(snapshots)}

    def fields_at(snapshot: Snapshot) -> dict[str, Any] | str:
        if snapshot.claims == UNREADABLE:
            return UNREADABLE
        return (snapshot.claims or {}).get(claim.id, ABSENT)

    def in_code(name: str, snapshot: Snapshot) -> str | None:
        at = order.get(snapshot.short, len(snapshots))
        held = [item for item in coded if item.component == name and claim.id in item.claims
                and position(item.since) <= at]
        return f"{held[-1].value} (in code: {held[-1].where})" if held else None

    def field_reader(spec: dataclasses.Field) -> Reader:
        def read(snapshot: Snapshot) -> Any:
            fields = fields_at(snapshot)
            if isinstance(fields, str):
                return fields
            value = fields.get(spec.name, _default(spec))
            return in_code(spec.name, snapshot) or value if value == _default(spec) else value
        return read

    def threshold_value(snapshot: Snapshot) -> Any:
        fields = fields_at(snapshot)
        if fields == UNREADABLE:
            return fields
        named = fields.get("threshold") if isinstance(fields, dict) else None  # the key that commit's claim named
        threshold = named if isinstance(named, str) and named else claim.threshold
        return lookup(snapshot.params, threshold)

    def setting_reader(key: str) -> Reader:
        return lambda snapshot: effective(snapshot.params, key)

    components = [(spec.name, field_reader(spec), claim.measures if spec.name == "statistic" else "")
                  for spec in rule_fields(claim)]
    components.append((THRESHOLD_VALUE, threshold_value, comments.get(claim.threshold, "")))
    for setting in getattr(claim, "settings", ()) or ():
        components += [(key, setting_reader(key), comments.get(key, "")) for key in _setting_keys(setting, snapshots)]
    return components


def _claim_records(claim: Claim, snapshots: Sequence[Snapshot], comments: Mapping[str, str],
                   coded: Sequence[Coded] = ()) -> list[dict[str, Any]]:
    """One record per component; results_before and status come after (_mark_results), "_parent" says where."""
    records = []
    catalogue = {spec.name for spec in rule_fields(claim)}
    for component, read, reason in _components(claim, snapshots, comments, coded):
        values = [read(snapshot) for snapshot in snapshots] or [ABSENT]
        start = _run_start(values)
        set_in = snapshots[start] if snapshots else Snapshot("", "", "", "", None, None)
        # The registry's first commit wrote down rules older code held: there its catalogue fields judge only
        # what already bore the claim's name.
        transcribed = component in catalogue and start > 0 and snapshots[start - 1].claims is None
        names = [claim.id] if transcribed else [claim.id, claim.statistic.metric]
        records.append({"claim": claim.id, "component": component, "value": values[-1],
                        "previous": values[start - 1] if start > 0 else ABSENT, "set_in": set_in.short,
                        "subject": set_in.subject, "results_before": False, "status": FIXED, "reason": reason,
                        "pilot": "", "history": _runs(values, snapshots),
                        "_parent": set_in.parent, "_names": names, "_where": _results_of(component)})
    return records


def _runs(values: Sequence[Any], snapshots: Sequence[Snapshot]) -> list[dict[str, Any]]:
    """The component's whole history: each value it took, from the commit that set it, oldest first (a value
    that came back is listed again: tuned, matched, tuned)."""
    return [{"value": value, "from": snapshots[at].short} for at, value in enumerate(values)
            if at == 0 or not _same(values[at - 1], value)] if snapshots else []


def _same(one: Any, other: Any) -> bool:
    return one == other or (one != one and other != other)  # NaN is NaN here


def _run_start(values: Sequence[Any]) -> int:
    """Where the final unbroken run of the last value starts."""
    start = len(values) - 1
    while start > 0 and _same(values[start - 1], values[-1]):
        start -= 1
    return start


def _mark_results(root: Path, records: list[dict[str, Any]]) -> None:
    """Each record's results_before and status: whether a tracked file under results/ at its set_in's parent (HEAD
    for the working tree) named its claim or its statistic's metric, as a whole word (a name inside a longer one is
    another's: kq_v_increasing, min_accuracy_gap)."""
    ids = sorted({name for record in records for name in record["_names"]})
    searches = sorted({(record["_parent"], record["_where"]) for record in records if record["_parent"]})
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        named = dict(zip(searches, pool.map(lambda search: _named_in_results(root, *search, ids), searches),
                         strict=True))
    for record in records:
        found = named.get((record.pop("_parent"), record.pop("_where")), set())
        before = any(name in found for name in record.pop("_names"))
        record["results_before"], record["status"] = before, CHANGED if before else FIXED


def _mark_pilots(records: list[dict[str, Any]], thresholds: Mapping[str, str], pilots: Sequence[Pilot]) -> None:
    """Each component a pilot set: changed after the data, `pilot` saying what was seen and where it is told."""
    for record in records:
        component = record["component"]
        read = thresholds[record["claim"]] if component == THRESHOLD_VALUE else component  # the params.yaml key
        found = [pilot for pilot in pilots if pilot.names(read)]
        if found:
            record["status"] = CHANGED
            record["pilot"] = "; ".join(f"{pilot.seen} ({pilot.source})" for pilot in found)


def _results_of(component: str) -> str:
    """Where a component's results are: a dataset's override judges that dataset's rows alone (its folders and
    gathered files under results/), every other component the whole of results/."""
    parts = component.split(".")
    return parts[1] if parts[0] == "datasets" and len(parts) > 2 else ""


def _named_in_results(root: Path, commit: str, dataset: str, ids: Sequence[str]) -> set[str]:
    """The ids that a tracked file under results/ (of `dataset` alone, if given) at `commit` names: one `git grep`
    for them all, each match printed (-o), each pattern matched as a whole word on its own."""
    patterns = [arg for claim in ids for arg in ("-e", claim)]
    where = [f":(glob){RESULTS}**/{dataset}/**", f":(glob){RESULTS}**/{dataset}.json"] if dataset else [RESULTS]
    out = _git(root, "grep", "-h", "-o", "-w", "-F", *patterns, commit, "--", *where, check=False)
    return set(out.stdout.decode(errors="replace").split()) & set(ids)


def _head_line(root: Path, snapshots: Sequence[Snapshot]) -> str:
    out = _git(root, "log", "-1", f"--abbrev={SHORT_HASH}", "--format=%h%x1f%B", "HEAD").stdout.decode(errors="replace")
    short, _, message = out.partition("\x1f")
    dirty = " (and the working tree's uncommitted changes to params.yaml or the claims module)" \
        if snapshots and snapshots[-1].label == UNCOMMITTED else ""
    return f"{short.strip()} {_subject(message)}{dirty}"


# --- params.yaml's comments ----------------------------------------------------------------------------------------

def key_comments(text: str) -> dict[str, str]:
    """Each dotted key of a params.yaml text -> the comment on its line, with the comment-only lines after it that
    are indented past that line (its continuation); keys without a comment are left out. A key inside a flow
    mapping ({horizon: 5.0e+3, ...}) shares its line's comment."""
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return {}
    lines, comments = text.splitlines(), {}
    for key, line in _key_lines(root, ""):
        comment = _comment(lines[line]) if line < len(lines) else ""
        if not comment:
            continue
        indent, more = _indent(lines[line]), line + 1
        while more < len(lines) and lines[more].lstrip().startswith("#") and _indent(lines[more]) > indent:
            comment += " " + lines[more].strip().lstrip("#").strip()
            more += 1
        comments[key] = comment
    return comments


def _key_lines(node: Any, prefix: str) -> Iterable[tuple[str, int]]:
    """(dotted key, line) of every key of a composed YAML mapping, nested ones too."""
    if not isinstance(node, yaml.MappingNode):
        return
    for key_node, value_node in node.value:
        key = f"{prefix}{key_node.value}"
        yield key, key_node.start_mark.line
        yield from _key_lines(value_node, key + ".")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _comment(line: str) -> str:
    """The comment of a YAML line: after the first # that starts a comment (not inside quotes)."""
    quote = ""
    for at, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"" and (at == 0 or line[at - 1] in " \t:[{,"):  # a quoted scalar opens, not an apostrophe
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[at + 1:].strip()
    return ""
