"""What a trained model selects in a review: each token's attention weight and the prediction.

    python -m toksel.explain RUN "review text" [key=value ...] [--json]

RUN is a kept model, the folder the train stage wrote it to, with or without `results/`:
train/<dataset>/<arm>/seed<k> (arm: trained, untrained, one_step). The review is tokenized as the dataset's
`prepare` did (word tokens, lowercased). A word outside the vocabulary is read as <unk>, or left out where the
vocabulary has none (the synthetic one); either way explain names it on stderr, and refuses a review with no
known word. The keys are params.yaml overrides, as for a stage (the dataset's settings are read from params.yaml).
Bad input (no such model, a review with no known word, a bad override): one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.data.tokenize import word_tokens
from toksel.data.vocabulary import UNKNOWN, Vocabulary
from toksel.models.reading import Reading, read_sequence
from toksel.runtime.config import load_config
from toksel.runtime.errors import ToksError
from toksel.runtime.io import read_json, read_npz
from toksel.summaries.shading import SHADE_CAP, class_name, over_uniform, shade

BAR = 30  # characters of a bar at the darkest shade (SHADE_CAP times the uniform weight or more)
RESULTS = Path("results")
PROG = "python -m toksel.explain"
EXAMPLES = f"""examples:
  {PROG} train/imdb/trained/seed0 "A wonderful, moving film. The acting is superb."
      each token with its attention weight w, w T (against the uniform weight 1/T of a review of T tokens) and a
      bar on the report's scale (none at or below uniform, full from SHADE_CAP x uniform), then the prediction
  {PROG} train/imdb/untrained/seed0 "A wonderful, moving film. The acting is superb."
      the same review read with random frozen embeddings (E0), for comparison
  {PROG} train/yelp_polarity/trained/seed1 "Cold fries, rude staff." --json
      one JSON object: the prediction, the probabilities, each token's weight, the unknown words
  {PROG} train/imdb/trained/seed0 "$(cat review.txt)" data.max_len=64
      a review from a file, read up to its first 64 tokens

exit codes: 0 read; 2 bad input (no such kept model, a review with no known word, a bad override), said in one
line on stderr. A review that begins with '-' follows '--': {PROG} RUN -- "-10/10, dreadful"."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Bad usage in one line on stderr, exit code 2 (argparse's own prints the usage too)."""
        print(f"explain: {message} (see {PROG} --help)", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    about = __doc__.split("\n\n")
    command = _Parser(prog=PROG, description="\n\n".join([about[0], *about[2:]]).strip(), epilog=EXAMPLES,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_argument("run", help="a kept model: train/<dataset>/<arm>/seed<k>, with or without results/ "
                                     "(arm: trained, untrained, one_step)")
    command.add_argument("text", help="the review, one argument (quote it)")
    command.add_argument("overrides", nargs="*", default=[], metavar="key=value",
                         help="params.yaml overrides, as for a stage (data.max_len=64)")
    command.add_argument("--json", action="store_true",
                         help="print one JSON object (prediction, probabilities, tokens with their weights, "
                              "unknown words) instead of the table, for scripts")
    return command


def kept_models(root: Path = RESULTS) -> list[str]:
    """The one-layer models the train stage kept under `root`, a seed range per dataset and arm:
    train/imdb/trained/seed{0,1,2}."""
    seeds: dict[Path, list[int]] = {}
    for path in root.glob("train/*/*/seed*/model.npz"):
        suffix = path.parent.name.removeprefix("seed")
        if suffix.isdigit():
            seeds.setdefault(path.parent.parent.relative_to(root), []).append(int(suffix))
    shown = []
    for folder, found in sorted(seeds.items()):
        numbers = ",".join(map(str, sorted(found)))
        shown.append(f"{folder.as_posix()}/seed{numbers if len(found) == 1 else '{' + numbers + '}'}")
    return shown


def model_folder(run: str, root: Path = RESULTS) -> Path:
    """The kept model's folder; a run that kept none is refused, naming the models that are kept."""
    folder = Path(run)
    folder = folder if folder.parts[:1] == (root.name,) else root / folder
    if (folder / "model.npz").exists():
        return folder
    kept = kept_models(root)
    if not kept:
        raise ToksError(f"no kept model at {folder}, and none is kept yet: train one first "
                        "(dvc repro train@imdb, or python -m pipelines.train dataset=imdb)")
    raise ToksError(f"no kept model at {folder}; the kept models: {', '.join(kept)}")


@dataclass(frozen=True)
class Explanation:
    model: str  # the kept model's folder under results/
    dataset: str
    words: list[str]  # the tokens as the model reads them (an unknown word is <unk>, or left out)
    unknown: list[str]  # the review's words outside the vocabulary, in order
    left_out: bool  # the vocabulary has no <unk>: unknown words are left out, not read as <unk>
    reading: Reading
    num_classes: int
    profile: str  # params.yaml's profile: full, or the small run's (quick) whose model this is

    def as_json(self) -> dict[str, Any]:
        """The prediction, the probabilities, each token's weight and the unknown words, for scripts."""
        probabilities = self.reading.probabilities
        return {"model": self.model, "dataset": self.dataset,
                "prediction": class_name(self.reading.predicted, self.num_classes),
                "probabilities": {class_name(k, self.num_classes): float(p) for k, p in enumerate(probabilities)},
                "tokens": [{"token": word, "weight": float(weight)}
                           for word, weight in zip(self.words, self.reading.weights, strict=True)],
                "unknown": self.unknown, "unknown_read_as": None if self.left_out else UNKNOWN,
                "profile": self.profile}


def _tokens(text: str, words: list[str], max_len: int | None, dataset: str) -> tuple[list[str], list[str]]:
    """The review's word tokens (the first max_len) and those outside the vocabulary; no known word: refused."""
    found = word_tokens(text)[:max_len]
    if not found:
        raise ToksError("the review has no word to read")
    known = set(words) - {UNKNOWN}
    unknown = [word for word in found if word not in known]
    if len(unknown) == len(found):
        raise ToksError(f"no word of the review is in {dataset}'s vocabulary (unknown: {' '.join(unknown)}): there "
                        "is nothing to read, and a prediction would only look confident")
    return found, unknown


def explain(run: str, text: str, overrides: Sequence[str] = ()) -> Explanation:
    """The review as the kept model `run` reads it."""
    folder = model_folder(run)
    model = read_npz(folder / "model.npz", producer="train")
    about = read_json(folder / "model.json", producer="train")
    if about.get("model") != "one_layer":
        raise ToksError(f"{folder} is a {about.get('model')} model: explain reads the one-layer model of the train "
                        "stage, whose tokens' scores and values are all it needs")
    dataset = about["dataset"]
    config = load_config([f"dataset={dataset}", *overrides])
    if config.data.tokenizer != "word":
        raise ToksError(f"explain reads word-tokenized datasets; {dataset} uses data.tokenizer = "
                        f"{config.data.tokenizer!r}")
    table = data_dir(dataset, int(about.get("seed", 0))) / "tokens.csv"
    tokens = read_token_table(table)
    if about["vocabulary"] != tokens.vocabulary_digest():  # prepare ran again since, with other settings
        raise ToksError(f"{folder} was trained on another vocabulary than {table} holds now: its token ids would "
                        f"read other words; run the train stage again (dvc repro train@{dataset})")
    words = tokens.words
    found, unknown = _tokens(text, words, config.data.max_len, dataset)
    left_out = words[0] != UNKNOWN  # a vocabulary without <unk> (synthetic data)
    if left_out:
        found = [word for word in found if word not in unknown]
    ids = Vocabulary(words).encode([found])[0]
    return Explanation(folder.relative_to(RESULTS).as_posix() if folder.is_relative_to(RESULTS) else str(folder),
                       dataset, [words[i] for i in ids], unknown, left_out,
                       read_sequence(model["scores"], model["values"], ids), tokens.num_classes, config.profile)


def _print_table(found: Explanation) -> None:
    """Each token's weight and bar on the report's scale (report/readings.py): a near-uniform reading shows no
    bars, however its largest weight compares with the others."""
    reading, length = found.reading, len(found.words)
    largest = reading.weights.max()
    print(f"{'token':>16}  {'weight':>7}  {'w T':>6}  bar: none at or below the uniform weight 1/{length}, full from "
          f"{SHADE_CAP:g} x")
    for word, weight in zip(found.words, reading.weights, strict=True):
        bar = "#" * round(BAR * shade(weight, length))
        print(f"{word:>16}  {weight:7.4f}  {over_uniform(weight, length):6.2f}  {bar}")
    probabilities = ", ".join(f"{class_name(k, found.num_classes)} {p:.3f}"
                              for k, p in enumerate(reading.probabilities))
    print(f"prediction: {class_name(reading.predicted, found.num_classes)} ({probabilities}); the largest weight "
          f"{largest:.3f} is on '{found.words[int(np.argmax(reading.weights))]}'")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as stop:  # --help (0) or bad usage (2, said in one line): a code to return, as for the rest
        return int(stop.code or 0)
    try:
        found = explain(args.run, args.text, args.overrides)
    except ToksError as error:
        print(f"explain: {error}", file=sys.stderr)
        return 2
    if found.profile != "full":
        print(f"explain: a model of the {found.profile} profile's run (profiles/{found.profile}.yaml: small data and "
              "d): its readings are not those of the full run", file=sys.stderr)
    if found.unknown and not args.json:
        how = "left out" if found.left_out else f"read as {UNKNOWN}"
        print(f"explain: not in the vocabulary, {how}: {' '.join(found.unknown)}", file=sys.stderr)
    try:
        if args.json:
            print(json.dumps(found.as_json(), indent=2))
        else:
            _print_table(found)
        sys.stdout.flush()
    except BrokenPipeError:  # read by `head` or a pager that quit early: the rest is not wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
