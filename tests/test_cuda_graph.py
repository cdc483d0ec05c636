"""A stack's step as one CUDA graph (train.cuda_graph, icl_core/training/cuda_graph.py).

On a CPU the graph's body runs eagerly: the step in a 0-dim tensor (counter draws read it
there), the learning rate a tensor the scheduler fills, gradients set to None before the backward. That body
trains to the numbers of the ordinary step (counter or generator draws; float64, warmup and
step decay, with clipping), resumes from a checkpoint to the numbers of an uninterrupted run,
and hands its members plain optimizers. On CUDA (run first by benchmarks/gpu_window.sh, and
by gpu_evidence.sh's GRAPH=1 gate) a replayed stack equals the eager body, a generator
stack's batches are each member's own, and a task whose curriculum reads the step on the
host is not captured.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_same_batch, tiny_member
from stack_scaling import OpCount  # the benchmark's counter: one way to count
from torch.func import functional_call, vmap

from icl_core.common.validation import ConfigError
from icl_core.running.trial import TrialSpec, run_trial
from icl_core.spec.config import graph_refusal, resolve_member
from icl_core.tasks.draws import CounterDraws, member_batch
from icl_core.training.cuda_graph import WARMUP_STEPS, StepGraph, eager_reason
from icl_core.training.stacked import StackedRun, _VmapLinear
from icl_core.training.train import MemberRun, counter_keys

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def member(seed: int, graph: bool, device: str = "cpu", dtype: str = "float64", **over):
    raw = tiny_member(**{"train__draws": "counter", "train__cuda_graph": graph,
                         "train__warmup_steps": 3, "train__schedule": "step",
                         "train__step_size": 5, "train__gamma": 0.5, "train__grad_clip": 0.5,
                         **over})
    return resolve_member({**raw, "seed": seed, "dtype": dtype, "device": device})


def stack(graph: bool, device: str = "cpu", dtype: str = "float64", seeds=(3, 7), **over):
    return StackedRun([MemberRun(member(s, graph, device, dtype, **over)) for s in seeds])


def weights(run: StackedRun) -> list[torch.Tensor]:
    return [p.detach().clone() for p in run.params.values()]


# a causal transformer's attention (mixers.py); mha_mlp's, bidirectional; head sizes a
# multiple of 4, which CUDA's float32 fused kernel needs
ATTENDING = {
    "transformer": tiny_member(),
    "mha_mlp": tiny_member(task={"name": "qstr", "n_points": 4, "dim": 4},  # E = 16
                           model={"name": "mha_mlp", "heads": 1, "mlp_width": 8},
                           eval={"n_prompts": 50, "baselines": []}),
}


def attending(name: str, seeds, **fields) -> StackedRun:
    """A stack of ATTENDING[name]'s members (one seed: a member alone), `fields` set."""
    return StackedRun([MemberRun(resolve_member({**ATTENDING[name], "seed": s, **fields}))
                       for s in seeds])


def test_a_tensor_step_draws_what_an_int_step_draws():
    keys = counter_keys([member(s, True) for s in (3, 7)], torch.device("cpu"))
    for step in (0, 17, 2**40 + 5):
        a = CounterDraws(keys, step).normal((4, 3), torch.float64)
        b = CounterDraws(keys, torch.tensor(step)).normal((4, 3), torch.float64)
        assert torch.equal(a, b)


@pytest.mark.parametrize("draws", ["counter", "generator"])
def test_the_graphs_body_trains_to_the_numbers_of_the_eager_step(draws):
    """Counter draws from the step tensor, or each member's generator (registered with the
    graph on CUDA): the body trains as the eager step does."""
    eager, body = stack(False, train__draws=draws), stack(True, train__draws=draws)
    assert eager_reason(body) == "no CUDA graph on a cpu device"
    lr = body.optimizer.param_groups[0]["lr"]
    assert torch.is_tensor(lr) and lr is body.lr
    losses_eager, losses_body = eager.train_until(12), body.train_until(12)
    assert losses_body == pytest.approx(losses_eager, rel=1e-10)
    for p, q in zip(weights(eager), weights(body), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-10, atol=1e-13)
    # the scheduler filled the same tensor: warmup, then halved at steps 5 and 10
    assert body.optimizer.param_groups[0]["lr"] is lr
    assert float(lr) == pytest.approx(eager.optimizer.param_groups[0]["lr"], rel=1e-15)
    assert float(lr) == pytest.approx(member(0, True).train.lr * 0.25, rel=1e-12)
    # a member's own optimizer stays a plain one: a float lr, its own flags
    run = body.sync_member(1)
    group = run.optimizer.param_groups[0]
    assert isinstance(group["lr"], float) and not group.get("capturable", False)


def test_the_graphs_body_resumes_to_the_numbers_of_an_uninterrupted_run(tmp_path):
    raw = [member(s, True, train__steps=12, train__report_every=4,
                  train__checkpoint_every=4).to_dict() for s in (3, 7)]
    whole = run_trial(TrialSpec("s", "t", str(tmp_path / "whole"), raw, stack="always"))
    assert set(whole.values()) == {"ok"}
    first = StackedRun([MemberRun(resolve_member(r)) for r in raw])
    first.train_until(8)
    states = [first.sync_member(k).state_dict() for k in range(2)]
    runs = []
    for r, state in zip(raw, states, strict=True):
        run = MemberRun(resolve_member(r))
        run.load_state_dict(state)
        runs.append(run)
    resumed = StackedRun(runs)
    assert float(resumed.lr) == pytest.approx(float(first.lr), rel=1e-15)
    resumed.train_until(12)
    straight = StackedRun([MemberRun(resolve_member(r)) for r in raw])
    straight.train_until(12)
    for p, q in zip(weights(straight), weights(resumed), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-10, atol=1e-13)


def test_the_graphs_body_writes_the_gradients_without_zeroing_them():
    """The body sets the gradients to None before its backward (as the eager step does), so
    the backward writes them: no zero_ per weight (one kernel each in the graph) and no
    accumulation into the zeros (another); a step's gradients are new tensors eagerly."""
    body = stack(True)
    body.train_until(2)
    before = [p.grad for p in body.trainable]
    with OpCount() as counter:
        body.static_step(torch.tensor(2))
    assert counter.ops["aten.zero_"] == 0
    assert all(p.grad is not None and p.grad is not g
               for p, g in zip(body.trainable, before, strict=True))


def test_a_stack_of_one_trains_as_its_member_in_a_larger_stack():
    """A stack of one runs its member's views without vmap (fewer kernels for a replayed lone
    member); it trains to the numbers that member reaches in a vmapped stack of two."""
    one, two = stack(True, seeds=(7,)), stack(True, seeds=(3, 7))
    assert one.train_until(12) == pytest.approx(two.train_until(12)[1:], rel=1e-10)
    for p, q in zip(weights(one), weights(two), strict=True):
        torch.testing.assert_close(p[0], q[1], rtol=1e-10, atol=1e-13)


def test_a_stack_of_one_launches_fewer_kernels_than_a_vmapped_stack():
    """What a replay of a lone member runs: its body without vmap's batched forms (a linear's
    bmm, bias scaling and add apart, a LayerNorm's affine apart) launches fewer kernels than
    the same body vmapped over two members: its draws, forward and backward (the optimizer
    is alike; on CUDA one fused operation). The tiny member on a CPU: 262 against 341."""
    launches = {}
    for seeds in ((7,), (3, 7)):
        run = stack(True, seeds=seeds)
        run.train_until(2)
        with OpCount() as counter:
            run._losses(torch.tensor(2)).sum().backward()
        launches[len(seeds)] = counter.launches
    assert launches[1] < 0.9 * launches[2], launches


@pytest.mark.parametrize("mixer", ["attention", "relu_attention"])
def test_a_vmapped_stack_builds_no_constant_a_step(mixer, monkeypatch):
    """The attention's causal mask, relu attention's key counts, the positions' indices and
    the counter draws' spread are constants, made once per length and device
    (common.device.constant): a stack's step launches nothing to build them (the mask took
    three kernels a layer each step); one first made under inference mode (a notebook's
    evaluation) still lets a step backpropagate."""
    from icl_core.common import device
    from icl_core.models import mixers

    monkeypatch.setattr(device, "_KEPT", {})  # a fresh cache (the kept one is never cleared)
    run = stack(False, dtype="float32", model={"name": "transformer", "width": 8, "depth": 2,
                                               "heads": 2, "mixer": mixer})
    with torch.inference_mode():
        mixers.attend(*[torch.randn(2, 7, 4)] * 3, causal=True)
    run.train_until(1)
    with OpCount() as counter:
        run.take_step(run.step)
    built = {op: n for op, n in counter.ops.items()
             if op in ("aten.ones", "aten.tril", "aten.triu", "aten.bitwise_not",
                       "aten.arange", "aten.full", "aten.fill_")}
    assert not built and counter.ops["aten.masked_fill"] > 0, built
    # each made once: the mask (the one made under inference mode, reused), the positions,
    # the spread of the step's one counter draw, relu's key counts
    assert len(device._KEPT) == (4 if mixer == "relu_attention" else 3)


@cuda
def test_a_cuda_members_checkpoint_names_its_gpu():
    """A state saved on CUDA names the GPU's model: an H100's state is not resumed on an H200
    (icl_core/running/store_checkpoints.py; here, as a lent GPU's window runs this file)."""
    from icl_core.running.store_checkpoints import origin

    name = torch.cuda.get_device_name(0)
    assert origin(tiny_member(device="cuda:0"))["device"] == f"cuda:0 ({name})"
    assert origin(tiny_member(device="cpu"))["device"] == "cpu"


@cuda
def test_a_constant_first_met_in_a_capture_is_not_kept_on_cuda():
    """A constant first made inside a CUDA graph's capture is only recorded there (made at
    each replay), so it is not kept for eager readers; one made eagerly is."""
    from icl_core.common import device

    def thrice(n: int, where: torch.device) -> torch.Tensor:
        return torch.arange(n, device=where) * 3

    where = torch.device("cuda")
    out = torch.zeros(11, dtype=torch.int64, device=where)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out.copy_(device.constant(thrice, 11, where))
    assert (thrice, (11, where)) not in device._KEPT
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, thrice(11, where))
    assert torch.equal(device.constant(thrice, 11, where), thrice(11, where))
    assert (thrice, (11, where)) in device._KEPT


def test_a_lone_member_with_cuda_graph_finishes_its_trial(tmp_path):
    """A trial's lone captured member (a stack of one) runs to the end, its reports and
    checkpoints in between. Its numbers against the member alone: test_stacked.py's
    test_a_stack_of_one_trains_as_its_member_alone."""
    raw = [member(3, True, train__steps=6, train__report_every=3,
                  train__checkpoint_every=3).to_dict()]
    assert set(run_trial(TrialSpec("s", "t", str(tmp_path), raw)).values()) == {"ok"}


def test_the_graphs_body_skips_the_steps_the_eager_step_skips():
    """skip_grad_norm no longer keeps a step out of a graph: its mask is made and applied on
    the device (icl_core/training/masked_adam.py). At 3.0, seeds 3 and 7 skip 11 and 8 of 12
    steps; the body skips the same ones and trains to the eager step's numbers."""
    eager, body = (stack(graph, train__skip_grad_norm=3.0) for graph in (False, True))
    losses_eager, losses_body = eager.train_until(12), body.train_until(12)
    assert [r.skipped_steps for r in body.runs] == [r.skipped_steps for r in eager.runs] \
        == [11, 8]
    assert losses_body == pytest.approx(losses_eager, rel=1e-10)
    for p, q in zip(weights(eager), weights(body), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-10, atol=1e-13)


LOOPED = {"name": "algoformer", "width": 8, "heads": 2, "layers": 1, "loops": 3, "window": 2}


def test_a_looped_model_is_captured_unless_its_loop_curriculum_reads_the_step():
    """A model's own training loss keeps its step out of a graph only where it reads the step
    (a loop curriculum: AlgoFormer's reduced and gpu presets have none), as a task's training
    curriculum does; on a CPU the reason is the device. The graph's body of such a stack
    trains to the eager step's numbers."""
    plain = member(3, True, model=LOOPED)
    assert graph_refusal(plain) is None
    assert graph_refusal(member(3, True, model={**LOOPED, "curriculum_start": 1})) == \
        "the model's own training loss reads the step on the host"
    assert graph_refusal(member(3, True, task={"name": "relu_teacher"}, eval__baselines=[])) \
        == "the task's training curriculum reads the step on the host"
    body, eager = stack(True, model=LOOPED), stack(False, model=LOOPED)
    assert eager_reason(body) == "no CUDA graph on a cpu device"
    assert body.train_until(8) == pytest.approx(eager.train_until(8), rel=1e-10)


@pytest.mark.parametrize("over, field_error", [
    ({"train__draws": "generator", "train__optimizer": "lbfgs"}, "needs online Adam/AdamW"),
    ({"train__draws": "generator", "train__dataset_size": 256}, "needs online batches"),
    ({"train__compile": True}, "choose one"),
])
def test_a_graph_the_config_cannot_have_is_refused_by_name(over, field_error):
    raw = tiny_member(**{"train__cuda_graph": True, "train__draws": "counter", **over})
    with pytest.raises(ConfigError, match=rf"train\.cuda_graph.*{field_error}"):
        resolve_member({**raw, "seed": 0})


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize("dims", [2, 3, 4])
@pytest.mark.parametrize("rows, grads", [("contiguous", "contiguous"), ("contiguous", "transposed"),
                                         ("transposed", "contiguous"), ("transposed", "transposed")])
def test_a_stacks_linear_is_f_linear_bit_for_bit(device, dims, rows, grads):
    """A vmapped stack's copy of nn.Linear (stacked._VmapLinear, two kernels fewer a layer)
    computes what F.linear computes under vmap, outputs and all three gradients, to the bit,
    whether a member's input and the gradient coming back are contiguous or not (BaseConv's
    gate meets a transposed convolution; torch's linear folds contiguous rows, not others)."""
    gen = torch.Generator().manual_seed(dims)
    lead = [8, 21, 5][:dims - 1]

    def drawn(last: int, layout: str) -> torch.Tensor:
        if layout == "contiguous":
            return torch.randn(3, *lead, last, dtype=torch.float64, generator=gen).to(device)
        t = torch.randn(3, *lead[:-1], last, lead[-1], dtype=torch.float64, generator=gen)
        return t.to(device).transpose(-1, -2)

    x, grad = drawn(16, rows), drawn(24, grads)
    layer = _VmapLinear(16, 24, dtype=torch.float64, device=device)
    weights = {k: torch.randn(3, *v.shape, dtype=torch.float64, generator=gen).to(device)
               for k, v in layer.named_parameters()}

    def run(f):
        xs = x.detach().requires_grad_()
        ws = {k: v.detach().requires_grad_() for k, v in weights.items()}
        y = vmap(f)(xs, ws)
        return [y, *torch.autograd.grad(y, [xs, *ws.values()], grad)]

    ours = run(lambda xs, ws: functional_call(layer, ws, (xs,)))
    torch_s = run(lambda xs, ws: torch.nn.functional.linear(xs, ws["weight"], ws["bias"]))
    assert [torch.equal(a, b) for a, b in zip(ours, torch_s, strict=True)] == [True] * 4


@pytest.mark.parametrize("name", ATTENDING)
def test_every_linear_of_a_stacks_copy_is_the_stacks_linear(name):
    """A vmapped stack's copy of the model runs each of its linear layers as _VmapLinear,
    nn.MultiheadAttention's out-projection (a marker subclass of nn.Linear) included."""
    copy = attending(name, (3, 7)).loss_module
    linears = [m for m in copy.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) >= 3 and all(type(m) is _VmapLinear for m in linears), linears


@cuda
@pytest.mark.parametrize("dtype, over, seeds", [
    ("float32", {}, (3, 7)), ("float32", {"train__skip_grad_norm": 3.0}, (3, 7)),
    ("float64", {}, (3, 7)),  # float64: MaskedAdam (steps_masked)
    ("float32", {}, (7,)),  # a stack of one: unvmapped
    ("float32", {"train__draws": "generator"}, (3, 7)),  # members' generators, graph-safe
    ("float32", {"train__draws": "generator"}, (7,)),
    ("float32", {"model": LOOPED}, (3, 7)),  # a model's own training loss, no curriculum
])
def test_a_replayed_stack_equals_the_eager_body_on_cuda(dtype, over, seeds):
    """Captured (the batch's mask on the device from the task: no copy inside the capture;
    the gradients written by the captured backward) and replayed, a stack trains as its
    eager body does."""
    eager, graphed = (stack(True, "cuda", dtype, seeds, **over) for _ in range(2))
    eager.graph = StepGraph(eager)
    eager.graph.why_eager = "held eager by the test"
    graphed.train_until(WARMUP_STEPS + 9)
    eager.train_until(WARMUP_STEPS + 9)
    assert graphed.graph.graph is not None and graphed.graph.why_eager is None
    skipped = [r.skipped_steps for r in eager.runs]
    assert [r.skipped_steps for r in graphed.runs] == skipped
    assert (sum(skipped) > 0) == ("train__skip_grad_norm" in over)  # exercised where set
    for p, q in zip(weights(eager), weights(graphed), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    # the replays advanced each member's generator as the eager steps did (a checkpoint's state)
    for a, b in zip(eager.runs, graphed.runs, strict=True):
        assert torch.equal(a.data_gen.get_state(), b.data_gen.get_state())


def fused_attentions(counter: OpCount) -> int:
    """SDPA's fused forward kernels (flash, efficient, cuDNN, the CPU's flash) counted."""
    return sum(n for op, n in counter.ops.items()
               if op.startswith("aten._scaled_dot_product_") and "attention" in op
               and "backward" not in op)


def test_the_fused_kernel_is_taken_only_where_it_trains_deterministically():
    """mixers.sdpa_deterministic / fused_under_vmap, by case (stand-ins for CUDA queries, so
    the rule is checked on a CPU too): on CUDA up to KEY_BLOCK tokens, or past them without
    gradients, in float64, or under torch's (not warn-only) deterministic algorithms; a
    stack takes SDPA on CUDA where it is deterministic, never in float64 or on a CPU."""
    from types import SimpleNamespace

    from icl_core.models.mixers import KEY_BLOCK, fused_under_vmap, sdpa_deterministic

    def q(cuda=True, dtype=torch.float32, tokens=KEY_BLOCK + 1):
        return SimpleNamespace(is_cuda=cuda, dtype=dtype, shape=(2, 4, tokens, 8))

    assert sdpa_deterministic(q(cuda=False)) and not fused_under_vmap(q(cuda=False))
    assert sdpa_deterministic(q(tokens=KEY_BLOCK)) and fused_under_vmap(q(tokens=KEY_BLOCK))
    assert sdpa_deterministic(q(dtype=torch.bfloat16, tokens=KEY_BLOCK))
    assert sdpa_deterministic(q(dtype=torch.float64)) and not fused_under_vmap(
        q(dtype=torch.float64, tokens=KEY_BLOCK))
    assert not sdpa_deterministic(q()) and not fused_under_vmap(q())  # past one key block
    with torch.no_grad():  # evaluation: no backward
        assert sdpa_deterministic(q()) and fused_under_vmap(q())
    for warn_only, expected in ((True, False), (False, True)):
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
        try:
            assert sdpa_deterministic(q()) == expected
        finally:
            torch.use_deterministic_algorithms(False)


@cuda
@pytest.mark.parametrize("name", ATTENDING)
def test_a_float32_stack_attends_in_one_fused_kernel_a_layer_on_cuda(name):
    """On CUDA a float32 stack's attention is SDPA's fused kernel, vmap's batching rule
    folding the members into its batch (mixers.attend): one forward kernel a layer for the
    whole stack, none looped member by member (torch warns where it loops), no mask applied
    in matmuls; each member's loss and gradients are its own alone (a stack of one: SDPA
    without vmap) to float32's rounding."""
    import warnings

    from icl_core.models.mha_mlp import MHAMLP
    from icl_core.models.mixers import SoftmaxAttention

    def run(seeds):
        return attending(name, seeds, device="cuda", dtype="float32")

    stacked, alone = run((3, 7)), [run((s,)) for s in (3, 7)]
    layers = sum(isinstance(m, (SoftmaxAttention, MHAMLP))
                 for m in stacked.runs[0].model.modules())
    with warnings.catch_warnings(record=True) as caught, OpCount() as counter:
        warnings.simplefilter("always")
        losses = stacked._losses(0)
        losses.sum().backward()
    looped = [str(w.message) for w in caught if "batching rule" in str(w.message)]
    assert not looped, looped
    assert layers >= 1 and fused_attentions(counter) == layers, dict(counter.ops)
    assert "aten.masked_fill" not in counter.ops
    for k, one in enumerate(alone):
        loss = one._losses(0)
        loss.sum().backward()
        torch.testing.assert_close(losses[k], loss[0], rtol=1e-5, atol=1e-7)
        for p, q in zip(stacked.trainable, one.trainable, strict=True):
            torch.testing.assert_close(p.grad[k], q.grad[0], rtol=1e-4, atol=1e-6)


@cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("long", [False, True], ids=["one key block", "past one key block"])
@pytest.mark.parametrize("name", ATTENDING)
def test_members_train_to_the_same_bits_twice_on_cuda(name, long, precision):
    """Same config, seed, device and dtype: the same numbers. Up to mixers.KEY_BLOCK tokens
    a stack takes CUDA's fused attention (one key block: no atomics across blocks); past it
    the fused backward adds its key blocks' gradients atomically, in an order that changes
    run to run, so there a member alone and a stack take the matmul form. Either way,
    training twice gives the same bits, in float32 and under bfloat16 autocast (whose
    fused kernel is another: flash or cuDNN where float32's is memory-efficient)."""
    from icl_core.models.mixers import KEY_BLOCK

    raw = {**ATTENDING[name],
           "train": {**ATTENDING[name]["train"], "steps": 5, "precision": precision}}
    if long:
        raw["task"] = {**raw["task"], "n_points": 4 * KEY_BLOCK + 7}  # several key blocks
    for seeds in ((3,), (3, 7)):
        runs = []
        for _ in range(2):
            run = attending(name, seeds, device="cuda", dtype="float32",
                            train=raw["train"], task=raw["task"])
            tokens = run.runs[0].task.sample(1, torch.Generator("cuda")).inputs.shape[1]
            assert (tokens > KEY_BLOCK) == long
            with OpCount() as counter:
                run.train_until(5)
            assert (fused_attentions(counter) > 0) == (not long), dict(counter.ops)
            runs.append(weights(run))
        assert all(torch.equal(p, q) for p, q in zip(*runs, strict=True)), seeds


# every task whose batch code runs on a generator stack's K·B prompts, in its branches
DRAWN_TASKS = [
    {"name": "linear_regression", "dim": 5, "n_points": 10, "noise_std": 0.1},
    {"name": "linear_regression", "dim": 4, "n_points": 8, "layout": "all_prefix",
     "spectrum": (1.0, 1.0, 0.5, 0.25), "w_law": "inverse"},
    {"name": "primitives", "op": "affine", "dim": 6, "n_points": 10},
    {"name": "primitives", "op": "multiply", "dim": 6, "n_points": 10},
    {"name": "primitives", "op": "read", "dim": 6, "n_points": 10},
    {"name": "ls_features", "dim": 5, "n_points": 10, "features": 2, "target": "grad",
     "w0_std": 1.0},
    {"name": "qstr", "n_points": 12, "dim": 6, "q": 3},
    {"name": "qstr", "n_points": 12, "dim": 6, "q": 1, "simple": True, "link": "sqnorm"},
    {"name": "ls_features", "dim": 5, "n_points": 10, "features": 1, "target": "w"},
    {"name": "rep_regression", "dim": 6, "n_points": 10, "hidden": 6, "noise_std": 0.1},
    {"name": "rep_ar", "dim": 6, "q": 3, "n_points": 10, "hidden": 6, "noise_std": 1.0},
    {"name": "cot_mlp", "dim": 6, "layers": 3, "n_points": 10, "noise_std": 0.1},
]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize("raw", DRAWN_TASKS, ids=lambda raw: "-".join(map(str, raw.values()))[:40])
def test_a_tasks_batches_for_a_generator_stack_are_each_members_own(raw, device):
    """A seed stack's generator draws run the task's batch code once on the K·B prompts
    (DrawnBatches.sample_members; the stacked step: tests/test_stacked.py): member k's draws
    are its own bit for bit and its generator ends where it does alone, in both dtypes, on
    the GPU the windows stack on too. Its batch is the one it draws alone: bit for bit on a
    CPU at B = 8; otherwise to rounding, where the batch code's products over K·B prompts
    take other kernels than over B (einsum over one prompt is a plain product; CPU: 1 ulp in
    primitives affine, rep_regression and rep_ar at B = 1 and 3), within the stack's
    tolerance."""
    from icl_core.tasks import TASKS, build_task

    cfg = TASKS.resolve(raw, "task")
    for dtype in (torch.float32, torch.float64):
        task = build_task(cfg, 0, torch.device(device), dtype)
        together = [torch.Generator(device=device).manual_seed(10 + k) for k in range(3)]
        alone = [torch.Generator(device=device).manual_seed(10 + k) for k in range(3)]
        for B in (8, 1, 3):
            batch = task.sample_members(B, together)
            for k, generator in enumerate(alone):
                # bit for bit on a CPU at B = 8; elsewhere a few ulps, carried
                tol = 0.0 if (device, B) == ("cpu", 8) else \
                    1e-5 if dtype == torch.float32 else 1e-12
                assert_same_batch(member_batch(batch, k), task.sample(B, generator), tol)
        for a, b in zip(together, alone, strict=True):
            assert torch.equal(a.get_state(), b.get_state())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_a_stacks_generator_draws_are_each_members_own_bit_for_bit(device):
    """What each member's generator draws into its rows of a stack's tensor (normal_,
    uniform_, random_ in place) is what randn, rand and randint draw on it alone, bit for
    bit, at any batch size, and the generators end alike."""
    from icl_core.tasks.draws import GeneratorDraws, MembersGeneratorDraws

    where = torch.device(device)
    for B in (1, 3, 8):
        for dtype in (torch.float32, torch.float64):
            gens = [torch.Generator(device=device).manual_seed(5 + k) for k in range(3)]
            solo = [GeneratorDraws(torch.Generator(device=device).manual_seed(5 + k), where)
                    for k in range(3)]
            draws = MembersGeneratorDraws(gens, where)
            shapes = [(B, 7, 3), (B, 5)]
            stacked = [*draws.normals(shapes, dtype), draws.uniform((B, 4), dtype),
                       draws.integers(12, (B, 6)), draws.normal((B, 2), dtype)]
            for k, each in enumerate(solo):
                own = [*each.normals(shapes, dtype), each.uniform((B, 4), dtype),
                       each.integers(12, (B, 6)), each.normal((B, 2), dtype)]
                for got, want in zip(stacked, own, strict=True):
                    assert torch.equal(got[k * B:(k + 1) * B], want)
            for g, each in zip(gens, solo, strict=True):
                assert torch.equal(g.get_state(), each.generator.get_state())


@cuda
def test_a_failed_capture_steps_eagerly_from_the_generators_it_found_on_cuda(monkeypatch):
    """A capture that fails (here: a host read inside it) leaves the stack eager, said once,
    with its members' generators where they were before it: the stack trains to the numbers
    of one never captured."""
    eager, failing = (stack(True, "cuda", "float32", train__draws="generator") for _ in range(2))
    eager.graph = StepGraph(eager)
    eager.graph.why_eager = "held eager by the test"
    body = failing.static_step

    def reads_the_host(step):
        losses = body(step)
        if torch.cuda.is_current_stream_capturing():
            float(losses.sum())  # not allowed while capturing: the capture fails
        return losses

    monkeypatch.setattr(failing, "static_step", reads_the_host)
    failing.train_until(WARMUP_STEPS + 6)
    eager.train_until(WARMUP_STEPS + 6)
    assert failing.graph.graph is None and failing.graph.why_eager.startswith("capture failed")
    for p, q in zip(weights(eager), weights(failing), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    for a, b in zip(eager.runs, failing.runs, strict=True):
        assert torch.equal(a.data_gen.get_state(), b.data_gen.get_state())
    assert torch.cuda.current_stream() == torch.cuda.default_stream()  # the stream given back
    torch.randn(1, device="cuda")  # the default generator draws eagerly again


@cuda
def test_a_curriculum_task_is_not_captured_on_cuda():
    run = stack(True, "cuda", "float32", task={"name": "relu_teacher", "dim": 4, "n_points": 6,
                                                "depth": 2, "hidden": 8,
                                                "curriculum_dims_start": 2,
                                                "curriculum_points_start": 3,
                                                "curriculum_every": 4},
                eval__baselines=[])
    run.train_until(WARMUP_STEPS + 2)
    assert run.graph.graph is None and "curriculum" in run.graph.why_eager
