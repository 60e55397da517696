"""Models with positions: each matches its formula written out per sequence, and padding changes nothing."""

import math

import pytest
import torch

from toksel.models.initial import initialise
from toksel.models.sequence import SequenceClassifier, masked_softmax

VARIANTS = {"one layer": {}, "two layers": {"layers": 2}, "two layers, W_KQ": {"layers": 2, "trained_kq": True},
            "MLP head": {"mlp": True}}


def _batch(seed=0, n=5, vocab=11, T=7):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, T + 1, (n,), generator=generator)
    X = torch.randint(0, vocab, (n, T), generator=generator)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return X.masked_fill(~mask, 0), mask, lengths


def _model(variant, num_classes=2, seed=0, vocab=11, d=8):
    init = initialise(vocab, d, seed, num_classes=num_classes)
    model = SequenceClassifier(init.E, init.p, init.v, **VARIANTS[variant])
    with torch.no_grad():  # trained W_KQ are not the identity: make them generic
        for parameter in (model.W1, model.W2):
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(seed + 1),
                                              dtype=parameter.dtype))
    return model


def _by_hand(model, tokens):
    """The model's formula for one unpadded sequence, written out with loops."""
    E, p, v = model.E, model.p, model.v
    rows = [E[token] for token in tokens]
    if model.layers == 2:
        hidden = []
        for e_i in rows:
            weights = torch.softmax(torch.stack([e_i @ model.W1 @ e_j for e_j in rows]), dim=0)
            hidden.append(e_i + sum(w * e_j for w, e_j in zip(weights, rows, strict=True)))
        rows = hidden
    direction = model.W2.T @ p if model.layers == 2 else p
    weights = torch.softmax(torch.stack([h @ direction for h in rows]), dim=0)
    z = sum(w * h for w, h in zip(weights, rows, strict=True))
    if model.mlp is not None:
        z = torch.relu(model.mlp[0].weight @ z + model.mlp[0].bias)
    return z @ v


@pytest.mark.parametrize("num_classes", [2, 4])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_model_matches_its_formula_on_a_padded_batch(variant, num_classes):
    model = _model(variant, num_classes)
    X, mask, lengths = _batch()
    with torch.no_grad():
        logits = model(X, mask)
        for row in range(len(X)):
            expected = _by_hand(model, X[row, : lengths[row]].tolist())
            torch.testing.assert_close(logits[row], expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_output_does_not_depend_on_the_padding(variant):
    model = _model(variant)
    X, mask, _ = _batch()
    longer_X = torch.cat([X, torch.randint(0, 11, (len(X), 5))], dim=1)  # 5 more pads of arbitrary ids
    longer_mask = torch.cat([mask, torch.zeros(len(X), 5, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(longer_X, longer_mask), model(X, mask), rtol=1e-12, atol=1e-14)


def test_masked_softmax_gives_pads_no_weight():
    weights = masked_softmax(torch.tensor([[1.0, 2.0, 50.0]]), torch.tensor([[True, True, False]]))
    torch.testing.assert_close(weights, torch.tensor([[1 / (1 + math.e), math.e / (1 + math.e), 0.0]]))


def test_the_mlp_head_is_drawn_from_its_seed_not_the_global_generator():
    init = initialise(11, 8, seed=0)
    first = SequenceClassifier(init.E, init.p, init.v, mlp=True, seed=3)
    torch.manual_seed(123)  # another global state
    second = SequenceClassifier(init.E, init.p, init.v, mlp=True, seed=3)
    other = SequenceClassifier(init.E, init.p, init.v, mlp=True, seed=4)
    for a, b, c in zip(first.mlp.parameters(), second.mlp.parameters(), other.mlp.parameters(), strict=True):
        assert torch.equal(a, b) and not torch.equal(a, c)
        assert a.abs().max() <= 8**-0.5
