"""The fused full-batch kernel computes what the torch model and autograd compute."""

import numpy as np
import pytest
import torch

from tests.test_model import _case, _exact_p_gradient, _smallest_gap
from toksel.models.fused import SHARED_EXP_SPREAD, FusedBags, loss_and_token_gradients
from toksel.models.one_layer import Bags, loss
from toksel.models.products import scores, transposed_product
from toksel.runtime.errors import ToksError


@pytest.mark.parametrize("num_classes", [2, 3])
@pytest.mark.parametrize("p_norm", [None, 30.0, 1e4])  # 1e4: scores spread > SHARED_EXP_SPREAD, per-entry exps
def test_loss_and_gradients_match_autograd(p_norm, num_classes):
    split, init = _case(seed=3, num_classes=num_classes)
    p = init.p if p_norm is None else init.p / init.p.norm() * p_norm
    E, p_leaf, v = (t.detach().clone().requires_grad_(True) for t in (init.E, p, init.v))
    reference = loss(E, p_leaf, v, Bags.from_split(split))
    grad_E, grad_p = torch.autograd.grad(reference, (E, p_leaf))
    E_np, p_np, v_np = init.E.numpy(), p.numpy(), init.v.numpy()
    if p_norm == 1e4:
        assert np.ptp(E_np @ p_np) > SHARED_EXP_SPREAD
    value, grad_scores, grad_values = loss_and_token_gradients(E_np @ p_np, E_np @ v_np,
                                                               FusedBags.from_split(split, num_classes))
    assert value == pytest.approx(reference.item(), rel=1e-12)
    np.testing.assert_allclose(E_np.T @ grad_scores, grad_p.numpy(), rtol=1e-9, atol=1e-15)
    # dL/dE = dL/da p^T + dL/dB V^T (one column of V for two classes)
    values_part = grad_values.reshape(len(E_np), -1) @ v_np.reshape(len(p_np), -1).T
    np.testing.assert_allclose(np.outer(grad_scores, p_np) + values_part, grad_E.numpy(), rtol=1e-9, atol=1e-14)


def test_model_refuses_labels_beyond_its_classes_and_values_of_the_wrong_shape():
    split, init = _case(seed=0, num_classes=3)
    with pytest.raises(ToksError, match="outside 0 .. 1"):
        FusedBags.from_split(split)
    bags = FusedBags.from_split(split, num_classes=3)
    E, p = init.E.numpy(), init.p.numpy()
    with pytest.raises(ValueError, match="expected"):
        loss_and_token_gradients(E @ p, E @ init.v.numpy()[:, 0], bags)


@pytest.mark.parametrize("exps", ["per entry", "per token"])
def test_saturated_gradient_is_exact_in_both_exp_paths(exps, monkeypatch):
    split, init = _case(seed=1)
    direction = init.p.numpy() / np.linalg.norm(init.p.numpy())
    E, v = init.E.numpy(), init.v.numpy()
    gap = _smallest_gap(split, E @ direction)
    # Every exp(-gap |p|) < 1e-26; per token, the scores must also span less than SHARED_EXP_SPREAD.
    p = direction * 60.0 / gap
    if exps == "per token":
        p = direction * min(60.0 / gap, 0.95 * SHARED_EXP_SPREAD / np.ptp(E @ direction))
        assert np.ptp(E @ p) < SHARED_EXP_SPREAD and (E @ p).max() > 0
    else:
        monkeypatch.setattr("toksel.models.fused.SHARED_EXP_SPREAD", 0.0)
    reference = _exact_p_gradient(split, E, p, v)
    _, grad_scores, _ = loss_and_token_gradients(E @ p, E @ v, FusedBags.from_split(split))
    np.testing.assert_allclose(E.T @ grad_scores, reference, rtol=1e-6, atol=1e-9 * np.abs(reference).max())


def test_threaded_products_match_numpy():
    rng = np.random.default_rng(0)
    E = rng.standard_normal((301, 67))
    p, g = rng.standard_normal(67), rng.standard_normal(301)
    np.testing.assert_allclose(scores(E, p), E @ p, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(transposed_product(E, g), E.T @ g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(scores(E[:, ::2], p[::2]), E[:, ::2] @ p[::2], rtol=1e-12, atol=1e-12)
