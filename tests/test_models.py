"""Model contract: shapes, causality (via gradients), dtype, ablation switches."""

from __future__ import annotations

import pytest
import torch

from icl_core.models import build_model, count_params, num_params
from icl_core.spec.config import resolve_member


def model_for(dtype=torch.float64, **model):
    cfg = resolve_member({
        "task": {"name": "linear_regression"},
        "model": {"name": "transformer", "width": 16, "depth": 3, "heads": 4, **model},
    }).model
    return build_model(cfg, d_in=5, d_out=2, max_len=12, causal=True,
                       device=torch.device("cpu"), dtype=dtype)


@pytest.mark.parametrize("mixer", ["attention", "baseconv"])
@pytest.mark.parametrize("layer_norm", [True, False])
def test_causal_transformer_ignores_the_future(layer_norm, mixer):
    """d out_i / d x_j == 0 for every j > i, and != 0 for j <= i."""
    torch.manual_seed(0)
    model = model_for(layer_norm=layer_norm, mixer=mixer)
    x = torch.randn(1, 10, 5, dtype=torch.float64, requires_grad=True)
    y = model(x)
    assert y.shape == (1, 10, 2) and y.dtype == torch.float64
    for i in range(10):
        (grad,) = torch.autograd.grad(y[0, i].sum(), x, retain_graph=True)
        influence = grad[0].abs().sum(-1)  # (T,)
        assert torch.all(influence[i + 1:] == 0), f"output {i} depends on a later token"
        assert torch.all(influence[: i + 1] > 0), f"output {i} ignores an earlier token"


def test_switches_change_the_architecture():
    with_all = model_for()
    no_ln = model_for(layer_norm=False)
    no_mlp = model_for(mlp=False)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in no_ln.modules())
    assert any(isinstance(m, torch.nn.LayerNorm) for m in with_all.modules())
    # per block: qkv 16*48+48, out 16*16+16, MLP 16*64+64 + 64*16+16, two LNs 2*32
    block = 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 + 16 + 64
    outer = 5 * 16 + 16 + 16 * 2 + 2 + 32  # read-in, read-out, final LN
    assert num_params(with_all) == 3 * block + outer
    assert num_params(no_mlp) == num_params(with_all) - 3 * (16 * 64 + 64 + 64 * 16 + 16 + 32)


def test_too_long_sequence_is_refused():
    with pytest.raises(ValueError, match="exceeds max_len=12"):
        model_for()(torch.zeros(1, 13, 5, dtype=torch.float64))


@pytest.mark.parametrize("over", [{}, {"layer_norm": False}, {"mlp": False}, {"mlp_ratio": 2},
                                  {"mixer": "baseconv"}])
def test_param_count_without_building_matches_the_model(over):
    model = model_for(**over)
    assert count_params(model.cfg, d_in=5, d_out=2, max_len=12, causal=True) == num_params(model)


def test_baseconv_is_the_papers_gated_convolution():
    """Eq. 2 written out by hand with an explicit double loop over (t, s <= t)."""
    from icl_core.models.mixers import BaseConv

    torch.manual_seed(1)
    mixer = BaseConv(width=3, heads=1, causal=True, max_len=6).double()
    with torch.no_grad():
        for p in mixer.parameters():
            p.normal_()
    u = torch.randn(2, 5, 3, dtype=torch.float64)
    v = mixer.in_proj(u)
    conv = torch.zeros_like(v)
    for t in range(5):
        for s in range(t + 1):
            conv[:, t] += mixer.filter[t - s] * v[:, s]
    expected = mixer.out(mixer.gate(u) * (conv + mixer.conv_bias))
    torch.testing.assert_close(mixer(u), expected, rtol=1e-12, atol=1e-12)
