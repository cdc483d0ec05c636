"""Cross-implementation: our GPT-2-style models against Hugging Face `GPT2Model`, the backbone
the peer code (Garg et al.'s in-context-learning, Yang et al.'s looped_transformer) builds on.

Our weights are copied into a `GPT2Model` configured with the same activation (ReLU: our MLP
is ReLU, the peers' `gelu_new`) and no dropout; outputs must agree in float64 to 1e-10
relative:
- `transformer` = read_out(GPT2Model(inputs_embeds=read_in(x)));
- `looped`: z_t = GPT2Model(inputs_embeds=z_{t-1} + read_in(x)), ŷ_t = read_out(z_t) at every
  loop t, as Yang's `TransformerModelLooped.f` calls its backbone once per iteration;
- `algoformer`: the same with a pre- and a post-`GPT2Model`.
Also: the looped state stays on the LayerNorm's scale over 100 loops, where the loop without
the per-loop LayerNorm (the `loop_norm=False` ablation, the model before the fix) grows.
"""

from __future__ import annotations

import pytest
import torch

from icl_core.models import build_model
from icl_core.spec.config import resolve_member

transformers = pytest.importorskip("transformers")  # the dev extra installs it

CPU, F64 = torch.device("cpu"), torch.float64
D_IN, D_OUT, MAX_LEN, T = 5, 3, 16, 11


def ours(model: dict, task: str = "rep_regression"):
    cfg = resolve_member({"task": {"name": task}, "model": model}).model
    torch.manual_seed(0)
    m = build_model(cfg, d_in=D_IN, d_out=D_OUT, max_len=MAX_LEN, causal=True, device=CPU,
                    dtype=F64)
    with torch.no_grad():  # GPT-2 init zeroes biases and leaves LayerNorm at (1, 0): perturb
        for name, p in m.named_parameters():  # every weight, so a mis-copied one shows
            if "bias" in name or "ln" in name:
                p.add_(0.1 * torch.randn_like(p))
    return m.eval()


def gpt2_from(wpe, blocks, ln_f, width: int, heads: int):
    """A GPT2Model holding our positions, blocks and final LayerNorm (Conv1D weights are our
    nn.Linear weights transposed; q, k, v are split in the same order)."""
    cfg = transformers.GPT2Config(
        n_embd=width, n_layer=len(blocks), n_head=heads, n_positions=MAX_LEN,
        n_inner=4 * width, activation_function="relu", resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, layer_norm_epsilon=1e-5, use_cache=False)
    ref = transformers.GPT2Model(cfg).to(F64).eval()
    pairs = [(ref.wpe.weight, wpe.weight), (ref.ln_f.weight, ln_f.weight),
             (ref.ln_f.bias, ln_f.bias)]
    for h, b in zip(ref.h, blocks, strict=True):
        pairs += [(h.ln_1.weight, b.ln1.weight), (h.ln_1.bias, b.ln1.bias),
                  (h.attn.c_attn.weight, b.mixer.qkv.weight.T), (h.attn.c_attn.bias,
                                                                 b.mixer.qkv.bias),
                  (h.attn.c_proj.weight, b.mixer.out.weight.T), (h.attn.c_proj.bias,
                                                                 b.mixer.out.bias),
                  (h.ln_2.weight, b.ln2.weight), (h.ln_2.bias, b.ln2.bias),
                  (h.mlp.c_fc.weight, b.mlp.up.weight.T), (h.mlp.c_fc.bias, b.mlp.up.bias),
                  (h.mlp.c_proj.weight, b.mlp.down.weight.T), (h.mlp.c_proj.bias,
                                                               b.mlp.down.bias)]
    with torch.no_grad():
        for dst, src in pairs:
            assert dst.shape == src.shape
            dst.copy_(src)
    return ref


def body_gpt2(body, cfg):
    return gpt2_from(body.wpe, body.blocks, body.ln_f, cfg.width, cfg.heads)


def assert_rel_close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-10) -> None:
    err = float((a - b).abs().max() / b.abs().max())
    assert err <= rel, f"relative error {err:.2e} > {rel:g}"


def inputs(seed: int = 1) -> torch.Tensor:
    return torch.randn(4, T, D_IN, dtype=F64, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
@pytest.mark.parametrize("depth, heads", [(1, 1), (3, 4)])
def test_transformer_equals_gpt2model(depth, heads):
    model = ours({"name": "transformer", "width": 16, "depth": depth, "heads": heads})
    ref = gpt2_from(model.wpe, model.blocks, model.ln_f, 16, heads)
    x = inputs()
    h = ref(inputs_embeds=model.read_in(x)).last_hidden_state
    assert_rel_close(model(x), model.read_out(h))


@torch.no_grad()
@pytest.mark.parametrize("layers, heads", [(1, 2), (2, 4)])
def test_looped_equals_gpt2model_called_every_loop(layers, heads):
    model = ours({"name": "looped", "width": 16, "layers": layers, "heads": heads, "loops": 6,
                  "window": 3})
    ref = body_gpt2(model.loop, model.cfg)
    x = inputs()
    e = model.read_in(x)
    z, by_ref = torch.zeros_like(e), {}
    for t in range(1, 13):
        z = ref(inputs_embeds=z + e).last_hidden_state  # [code: Yang, f(output + embeds)]
        by_ref[t] = model.read_out(z)
    outs = model.loop_outputs(x, list(by_ref))
    for t, y in by_ref.items():
        assert_rel_close(outs[t], y)
    assert_rel_close(model(x), by_ref[6])  # forward: the training T loops


@torch.no_grad()
def test_algoformer_equals_pre_looped_post_gpt2models():
    model = ours({"name": "algoformer", "width": 16, "layers": 2, "heads": 2, "loops": 4,
                  "window": 2})
    pre, loop, post = (body_gpt2(b, model.cfg) for b in (model.pre, model.loop, model.post))
    x = inputs(2)
    e = pre(inputs_embeds=model.read_in(x)).last_hidden_state
    z = torch.zeros_like(e)
    outs = model.loop_outputs(x, [1, 4, 9])
    for t in range(1, 10):
        z = loop(inputs_embeds=z + e).last_hidden_state
        if t in outs:
            assert_rel_close(outs[t], model.read_out(post(inputs_embeds=z).last_hidden_state))


@torch.no_grad()
def test_looped_state_stays_bounded_over_100_loops():
    """With the final LayerNorm every loop, |z_t| stays on the LayerNorm's scale; without it
    (the ablation, i.e. the model before the fix) the state grows with t."""
    x = inputs(3)

    def norms(loop_norm: bool) -> torch.Tensor:
        model = ours({"name": "looped", "width": 16, "heads": 2, "loops": 4, "window": 2,
                      "loop_norm": loop_norm})
        e = model.embed(x)
        z, out = torch.zeros_like(e), []
        for _ in range(100):
            z = model.iterate(e, z, 1)
            out.append(float(z.norm(dim=-1).mean() / e.norm(dim=-1).mean()))
        return torch.tensor(out)

    bounded, grows = norms(True), norms(False)
    assert bounded.max() < 3 * bounded[0] and bounded[-10:].std() < 0.1 * bounded[-10:].mean()
    assert grows[-1] > 10 * grows[0]  # what the test guards against


def test_loop_norm_is_always_in_the_config_hash():
    """Rows of the looped model before the per-loop LayerNorm (same fields, no `loop_norm`)
    must not count as finished for the fixed model."""
    from icl_core.spec.config import config_hash

    member = resolve_member({"task": {"name": "rep_regression"}, "model": {"name": "looped"}})
    plain = member.to_dict()
    old = {**plain, "model": {k: v for k, v in plain["model"].items() if k != "loop_norm"}}
    assert member.hash != config_hash(old, member.defaults())
    assert member.hash == config_hash(plain, member.defaults())
