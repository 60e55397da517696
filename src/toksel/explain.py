"""What a trained model selects in a review: `python -m toksel.explain <run> "review text" [key=value ...]`.

<run> is a kept model, the folder a training stage wrote it to, with or without `results/`:
train/<dataset>/<arm>/seed<k> (arm: trained, untrained, one_step). The review is tokenized as the dataset's
`prepare` did (word tokens, lowercased; words outside the vocabulary are <unk>, or left out where the
vocabulary has none, as the synthetic one), and each token is printed with
its attention weight (and a bar as long as the weight against the largest), then the prediction. The keys are
params.yaml overrides, as for a stage (the dataset's settings are read from params.yaml).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.data.tokenize import word_tokens
from toksel.data.vocabulary import UNKNOWN, Vocabulary
from toksel.models.reading import Reading, read_sequence
from toksel.report.readings import class_name
from toksel.runtime.config import load_config
from toksel.runtime.errors import ToksError
from toksel.runtime.io import read_json, read_npz

BAR = 30  # characters of the largest weight's bar


def model_folder(run: str) -> Path:
    folder = Path(run)
    folder = folder if folder.parts[:1] == ("results",) else Path("results") / folder
    if not (folder / "model.npz").exists():
        raise ToksError(f"{folder} holds no kept model (model.npz): name a training run such as "
                        "train/imdb/trained/seed0, after `dvc repro train@imdb`")
    return folder


def explain(run: str, text: str, overrides: list[str] = ()) -> tuple[list[str], Reading, int]:
    """The review's tokens (as the model sees them), the model's reading and the number of classes."""
    folder = model_folder(run)
    model = read_npz(folder / "model.npz", producer="train")
    about = read_json(folder / "model.json", producer="train")
    if about.get("model") != "one_layer":
        raise ToksError(f"{folder} is a {about.get('model')} model: explain reads the one-layer model of the train "
                        "stage, whose tokens' scores and values are all it needs")
    config = load_config([f"dataset={about['dataset']}", *overrides])
    if config.data.tokenizer != "word":
        raise ToksError(f"explain reads word-tokenized datasets; {about['dataset']} uses data.tokenizer = "
                        f"{config.data.tokenizer!r}")
    table = data_dir(about["dataset"], int(about.get("seed", 0))) / "tokens.csv"
    tokens = read_token_table(table)
    if about["vocabulary"] != tokens.vocabulary_digest():  # prepare ran again since, with other settings
        raise ToksError(f"{folder} was trained on another vocabulary than {table} holds now: its token ids would "
                        f"read other words; run the train stage again (dvc repro train@{about['dataset']})")
    words = tokens.words
    found = word_tokens(text)[:config.data.max_len]
    if words[0] != UNKNOWN:  # a vocabulary without <unk> (synthetic data): a word outside it is left out
        known = set(words)
        outside = [word for word in found if word not in known]
        if outside:
            print(f"explain: not in the vocabulary, left out: {' '.join(outside)}", file=sys.stderr)
        found = [word for word in found if word not in outside]
    ids = Vocabulary(words).encode([found])[0]
    if len(ids) == 0:
        raise ToksError("the review has no word to read")
    return [words[i] for i in ids], read_sequence(model["scores"], model["values"], ids), tokens.num_classes


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) < 2 or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0].split(": ", 1)[1], file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    try:
        words, reading, classes = explain(args[0], args[1], args[2:])
    except ToksError as error:
        print(f"explain: {error}", file=sys.stderr)
        return 2
    largest = reading.weights.max()
    for word, weight in zip(words, reading.weights, strict=True):
        print(f"{word:>16}  {weight:7.4f}  {'#' * max(1, round(BAR * weight / largest))}")
    probabilities = ", ".join(f"{class_name(k, classes)} {p:.3f}" for k, p in enumerate(reading.probabilities))
    print(f"prediction: {class_name(reading.predicted, classes)} ({probabilities}); the largest weight "
          f"{largest:.3f} is on '{words[int(np.argmax(reading.weights))]}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
