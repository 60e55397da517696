"""The bag-of-tokens model equals the dense softmax(p^T E_X^T) E_X v, in value and gradient."""

import numpy as np
import pytest
import torch

from toksel.data.corpus import PackedSplit
from toksel.models import one_layer
from toksel.models.initial import initialise
from toksel.models.one_layer import Bags, classification_loss, dense_forward, forward


def _case(seed=0, n=25, vocab=12, T=7, d=16, num_classes=2):
    rng = np.random.default_rng(seed)
    # Small vocabulary and long sequences: many repeated tokens, so the counts matter.
    tokens = rng.integers(0, vocab, size=(n, T))
    split = PackedSplit.from_sequences(list(tokens), rng.integers(0, num_classes, size=n), vocab)
    init = initialise(vocab, d, seed, num_classes=num_classes)
    return split, init


def _values_and_gradients(model, E, p, v, inputs, bags):
    E, p, v = (t.detach().clone().requires_grad_(True) for t in (E, p, v))
    f = model(E, p, v, inputs)
    loss = classification_loss(f, bags.labels)
    return (f.detach(), loss.detach(), *torch.autograd.grad(loss, (E, p, v)))


@pytest.mark.parametrize("num_classes", [2, 3])
@pytest.mark.parametrize("p_norm", [None, 1e2, 1e4])
def test_bag_of_tokens_equals_dense_form_with_gradients(p_norm, num_classes):
    split, init = _case(num_classes=num_classes)
    p = init.p if p_norm is None else init.p / init.p.norm() * p_norm
    bags = Bags.from_split(split)
    X = torch.from_numpy(split.dense_sequences())
    sparse = _values_and_gradients(forward, init.E, p, init.v, bags, bags)
    dense = _values_and_gradients(dense_forward, init.E, p, init.v, X, bags)
    assert sparse[0].shape == ((split.n,) if num_classes == 2 else (split.n, num_classes))
    for name, a, b in zip(("f", "loss", "dE", "dp", "dv"), sparse, dense, strict=True):
        assert torch.isfinite(a).all(), name
        scale = max(b.abs().max().item(), 1e-300)
        assert (a - b).abs().max().item() <= 1e-6 * max(scale, 1.0), name


def test_saturated_softmax_keeps_a_tiny_gradient_exact():
    """At large |p| the gradient on p is exponentially small; it must not be rounding noise."""
    split, init = _case(seed=1)
    bags = Bags.from_split(split)
    direction = init.p / init.p.norm()
    p = direction * 60.0 / _smallest_gap(split, (init.E @ direction).numpy())  # every exp(-gap |p|) < 1e-26
    gradient = _values_and_gradients(forward, init.E, p, init.v, bags, bags)[3].numpy()
    reference = _exact_p_gradient(split, init.E.numpy(), p.numpy(), init.v.numpy())
    assert 0 < np.abs(reference).max() < 1e-20  # far below the rounding error of f itself
    np.testing.assert_allclose(gradient, reference, rtol=1e-6, atol=1e-9 * np.abs(reference).max())


def _smallest_gap(split, scores):
    """The smallest score gap between a sequence's top token and any other of its tokens."""
    gaps = []
    for row in range(split.n):
        values = np.sort(scores[split.bag_tokens[split.bag_indptr[row]:split.bag_indptr[row + 1]]])
        if len(values) > 1:
            gaps.append(values[-1] - values[-2])
    return min(gaps)


def _exact_p_gradient(split, E, p, v):
    """dL/dp = (1/n) sum_X -y sigma(-y f) sum_s q_s (b_s - b_r + b_r - f) E_s, with b_s - f summed as differences."""
    from math import fsum

    a, b = E @ p, E @ v
    gradient = np.zeros_like(p)
    for row in range(split.n):
        start, stop = split.bag_indptr[row], split.bag_indptr[row + 1]
        tokens, counts = split.bag_tokens[start:stop], split.bag_counts[start:stop]
        w = counts * np.exp(a[tokens] - a[tokens].max())
        q = w / w.sum()
        top = tokens[np.argmax(a[tokens])]
        f_minus_top = fsum(q_s * (b[s] - b[top]) for q_s, s in zip(q, tokens, strict=True))
        y = 2 * split.labels[row] - 1
        g = -y / (1 + np.exp(y * (b[top] + f_minus_top))) / split.n
        for q_s, s in zip(q, tokens, strict=True):
            gradient += g * q_s * ((b[s] - b[top]) - f_minus_top) * E[s]
    return gradient


def test_output_is_a_convex_combination_of_the_token_values():
    split, init = _case(seed=2)
    bags = Bags.from_split(split)
    f = forward(init.E, init.p * 1e3, init.v, bags)
    b = (init.E @ init.v).numpy()
    for row in range(split.n):
        tokens = split.bag_tokens[split.bag_indptr[row]:split.bag_indptr[row + 1]]
        assert b[tokens].min() - 1e-12 <= f[row].item() <= b[tokens].max() + 1e-12


def test_initialisation_is_seeded_with_the_stated_scales():
    a, b = initialise(500, 400, seed=3), initialise(500, 400, seed=3)
    assert torch.equal(a.E, b.E) and torch.equal(a.p, b.p) and torch.equal(a.v, b.v)
    assert abs(a.v.norm().item() - 1) < 1e-12
    assert abs(a.E.var().item() * 400 - 1) < 0.02  # E_s ~ N(0, I/d)


def test_multiclass_initialisation_has_orthonormal_output_vectors():
    V = initialise(50, 64, seed=0, num_classes=5).v
    assert V.shape == (64, 5)
    torch.testing.assert_close(V.T @ V, torch.eye(5, dtype=V.dtype), rtol=0, atol=1e-12)
    # The binary draws are those of a two-class initialisation: E, p and v unchanged by the option.
    two, five = initialise(50, 64, seed=0), initialise(50, 64, seed=0, num_classes=5)
    assert torch.equal(two.E, five.E) and torch.equal(two.p, five.p)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_training_steps_products_give_autograds_gradients(dtype):
    generator = torch.Generator().manual_seed(3)
    shapes = ((37, 11), (11,), (11,), (37,), (37,))
    E, p, v, g, h = (torch.randn(*shape, generator=generator, dtype=dtype) for shape in shapes)
    gradients = []
    for products in (one_layer.token_products, lambda E, p, v: (E @ p, E @ v)):
        leaves = [tensor.clone().requires_grad_() for tensor in (E, p, v)]
        scores, values = products(*leaves)
        (scores @ g + values @ h).backward()
        gradients.append([leaf.grad for leaf in leaves])
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    for ours, autograds in zip(*gradients, strict=True):
        assert ours.dtype == dtype and torch.allclose(ours, autograds, rtol=tolerance, atol=tolerance)
    frozen = E.clone()  # a frozen E (no gradient) costs no dE
    scores, values = one_layer.token_products(frozen, p.clone().requires_grad_(), v)
    scores.sum().backward()
    assert frozen.grad is None
