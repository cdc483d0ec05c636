"""Claims of Gao et al., AlgoFormer: a looped transformer with a pre- and a post-transformer
(sweeps/algoformer.py; docs/REPRODUCTION.md, "AlgoFormer"). The paper plots no numbers and
names no factors (notes §5), so every trained-model claim is an ordering ("better"), or a
sign ("slope"), on the mean over test prompts (the paper's validation error) at the last
prompt position. The reduced studies (d = 3, N = 10, 4000 steps, 5 seeds) carry the
verdicts; Fig 2's AR and CoT panels exist at `cpu` scale only.

Iterations: the model's rows after t loops carry `loop_iter` (t = T equals its headline rows),
the GD / Newton baselines' rows after t iterations `infer_iter`; both are scored on the
model's own test prompts, so Fig 5 is paired per seed. The two closed-form rows are computed
here, in process (`gpt2_bodies_error`, `newton_error`, `gd_at_machine_precision`).

Readings (the paper is silent): Fig 3 "larger ΔT is stable" is declared as its testable half,
ΔT = 1 drifting after T, as the project's criterion was written before the engine: its error
at t = 50 leaves its seed range at t = T (the seeds' intervals apart, the engine's "better");
"ΔT = 4 stays flat" needs a tolerance the paper does not give and is not declared.
"Larger T trains harder": T = 8 above T = 4, each at its own training T (the headline rows).
Fig 5 "the beginning stages": t <= 3; "better with noise": at the preset's last iteration,
t = 30, AlgoFormer and each baseline after the same t (not each curve's best).
"""

from __future__ import annotations

from analysis.claims.declare import Cell, Claim, Source

PAPER = "AlgoFormer"
STAT = "mean"  # the paper's validation error: the squared error averaged over prompts
EXAMPLES = Source("algoformer", "examples", "reduced")
EXAMPLES_CPU = Source("algoformer", "examples", "cpu")
LOOPS = Source("algoformer", "loops", "reduced")
LAYERS_HEADS = Source("algoformer", "layers_heads", "reduced")
VS_NEWTON = Source("algoformer", "vs_newton", "reduced")
REDUCED = "reduced: d = 3, N = 10, 4000 steps, 5 seeds"
GD, NEWTON = "gd_tuned_float64", "newton_float64"  # tuned per prefix length, on held-out prompts
FIG2 = "docs/figures/reduced/examples__algo_examples.png"
FIG3 = "docs/figures/reduced/loops__algo_loops.png"
FIG4 = "docs/figures/reduced/layers_heads__algo_layers_heads.png"
FIG5 = "docs/figures/reduced/vs_newton__algo_newton.png"

# Fig 2 (examples): the reduced task and the cpu preset's AR / CoT tasks; the cpu models
TASKS = {"regression": {"task.name": "rep_regression", "task.dim": 3, "task.n_points": 10,
                        "task.hidden": 3},
         "AR(3)": {"task.name": "rep_ar", "task.dim": 5, "task.n_points": 20},
         "CoT": {"task.name": "cot_mlp", "task.dim": 5, "task.n_points": 10}}
MODELS = {"AlgoFormer": {"model.name": "algoformer", "model.loops": 8, "model.window": 6},
          "looped": {"model.name": "looped", "model.loops": 8, "model.window": 6},
          "standard": {"model.name": "transformer", "model.depth": 4}}
# Fig 3 (loops): (T, ΔT) of the reduced grid, inference to t = 50
LAST_LOOP = 50
# Fig 5 (vs_newton): (T, ΔT) = (6, 6); loops and iterations to t = 30
FIG5_MODEL = {"model.loops": 6, "model.window": 6}
EARLY = (1, 2, 3)  # "the beginning stages": the project's reading, t <= 3
HORIZON = 30  # the preset's last loop / iteration
MACHINE = 1e-20  # squared query error / Var(y) at float64 machine precision (eps² ≈ 5e-32)


def _fig2_part(task: str, a: str, b: str, source: Source) -> Claim:
    return Claim(id=f"algoformer.examples.{task.split('(')[0].lower()}.{a}_below_{b}".lower(),
                 paper=PAPER, figure=f"{task}: {a} < {b}", quote="", source=source,
                 kind="better", statistic=STAT,
                 cells=(Cell(f"{a}, {task}", {**TASKS[task], **MODELS[a]}),
                        Cell(f"{b}, {task}", {**TASKS[task], **MODELS[b]})))


def _loop_cell(T: int, dT: int, t: int | None = None) -> Cell:
    """(T, ΔT)'s rows at its training T (t None: the headline rows) or after t loops; past T
    the cell is the claimed drift itself: the config is gated once, at t = T."""
    where = {"model.name": "algoformer", "model.loops": T, "model.window": dT}
    if t is None:
        return Cell(f"(T, ΔT) = ({T}, {dT})", where)
    return Cell(f"(T, ΔT) = ({T}, {dT}), t = {t}", {**where, "loop_iter": t}, gated=t <= T)


def _algo_cell(L: int, h: int) -> Cell:
    return Cell(f"AlgoFormer L = {L}, h = {h}",
                {"model.name": "algoformer", "model.layers": L, "model.heads": h})


def _lh_part(what: str, figure: str, a: Cell, b: Cell) -> Claim:
    return Claim(id=f"algoformer.layers_heads.{what}", paper=PAPER, figure=figure, quote="",
                 source=LAYERS_HEADS, kind="better", statistic=STAT, cells=(a, b))


def _vs_baseline(sigma: float, t: int, ref: str, what: str) -> Claim:
    """AlgoFormer after t loops below the baseline `ref` after t iterations, on the same
    prompts (paired per seed)."""
    name = {GD: "GD", NEWTON: "Newton"}[ref]
    sid = f"s{sigma:g}".replace(".", "p")  # ids are dotted paths: σ = 0.1 -> s0p1
    return Claim(id=f"algoformer.vs_newton.{what}.{sid}.t{t}.{name.lower()}",
                 paper=PAPER, figure=f"σ = {sigma:g}, t = {t}: AlgoFormer < {name}",
                 quote="", source=VS_NEWTON, kind="better", statistic=STAT,
                 cells=(Cell(f"AlgoFormer (6, 6), σ = {sigma:g}, t = {t}",
                             {"task.noise_std": sigma, **FIG5_MODEL, "loop_iter": t}),),
                 reference=ref, reference_where={"infer_iter": t})


# ---- the closed forms (kind "exact"), each computed in process in a few seconds ----------

def gpt2_bodies_error() -> float:
    """The largest relative error, in float64, between our `transformer`, `looped` (after
    every loop t = 1..12) and `algoformer` (t = 1, 4, 9) and the same weights run by Hugging
    Face `GPT2Model` (ReLU, no dropout; every bias and LayerNorm perturbed so a mis-copied
    weight shows), as tests/test_gpt2_reference.py checks. Needs `transformers` (the dev
    extra): without it this raises ImportError rather than give a verdict."""
    import torch

    from icl_core.models import build_model
    from icl_core.spec.config import resolve_member

    try:
        import transformers
    except ImportError as exc:
        raise ImportError("algoformer.model.gpt2_bodies needs `transformers` (pip install "
                          "-e '.[dev]'): the reference GPT2Model") from exc
    cpu, f64, d_in, d_out, max_len, n = torch.device("cpu"), torch.float64, 5, 3, 16, 11

    def ours(model: dict):
        cfg = resolve_member({"task": {"name": "rep_regression"}, "model": model}).model
        torch.manual_seed(0)
        m = build_model(cfg, d_in=d_in, d_out=d_out, max_len=max_len, causal=True,
                        device=cpu, dtype=f64)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "bias" in name or "ln" in name:
                    p.add_(0.1 * torch.randn_like(p))
        return m.eval()

    def gpt2(body, width: int, heads: int):
        cfg = transformers.GPT2Config(
            n_embd=width, n_layer=len(body.blocks), n_head=heads, n_positions=max_len,
            n_inner=4 * width, activation_function="relu", resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, layer_norm_epsilon=1e-5, use_cache=False)
        ref = transformers.GPT2Model(cfg).to(f64).eval()
        pairs = [(ref.wpe.weight, body.wpe.weight), (ref.ln_f.weight, body.ln_f.weight),
                 (ref.ln_f.bias, body.ln_f.bias)]
        for h, b in zip(ref.h, body.blocks, strict=True):
            pairs += [(h.ln_1.weight, b.ln1.weight), (h.ln_1.bias, b.ln1.bias),
                      (h.attn.c_attn.weight, b.mixer.qkv.weight.T),
                      (h.attn.c_attn.bias, b.mixer.qkv.bias),
                      (h.attn.c_proj.weight, b.mixer.out.weight.T),
                      (h.attn.c_proj.bias, b.mixer.out.bias),
                      (h.ln_2.weight, b.ln2.weight), (h.ln_2.bias, b.ln2.bias),
                      (h.mlp.c_fc.weight, b.mlp.up.weight.T), (h.mlp.c_fc.bias, b.mlp.up.bias),
                      (h.mlp.c_proj.weight, b.mlp.down.weight.T),
                      (h.mlp.c_proj.bias, b.mlp.down.bias)]
        for dst, src in pairs:
            dst.copy_(src)
        return lambda h_: ref(inputs_embeds=h_).last_hidden_state

    def rel(a, b) -> float:
        return float((a - b).abs().max() / b.abs().max())

    x = torch.randn(4, n, d_in, dtype=f64, generator=torch.Generator().manual_seed(1))
    errs = []
    with torch.no_grad():
        std = ours({"name": "transformer", "width": 16, "depth": 3, "heads": 4})
        errs.append(rel(std(x), std.read_out(gpt2(std, 16, 4)(std.read_in(x)))))
        looped = ours({"name": "looped", "width": 16, "layers": 2, "heads": 4, "loops": 6,
                       "window": 3})
        body = gpt2(looped.loop, 16, 4)
        e = looped.read_in(x)
        z, outs = torch.zeros_like(e), looped.loop_outputs(x, list(range(1, 13)))
        for t in range(1, 13):
            z = body(z + e)
            errs.append(rel(outs[t], looped.read_out(z)))
        algo = ours({"name": "algoformer", "width": 16, "layers": 2, "heads": 2, "loops": 4,
                     "window": 2})
        pre, loop, post = (gpt2(b, 16, 2) for b in (algo.pre, algo.loop, algo.post))
        e = pre(algo.read_in(x))
        z, outs = torch.zeros_like(e), algo.loop_outputs(x, [1, 4, 9])
        for t in range(1, 10):
            z = loop(z + e)
            if t in outs:
                errs.append(rel(outs[t], algo.read_out(post(z))))
    return max(errs)


def _fig5_solvers(name: str):
    """(squared query error / Var(y) per test prompt) of the tuned solver `name` ("gd_tuned"
    or "newton") after HORIZON iterations on noiseless prefix problems of the reduced Fig 5
    task (d = 3, N = 10 examples: the last position), its step chosen by the project's grid
    search on 256 held-out prompts at the largest iteration, as the evaluator does."""
    import torch

    from icl_core.algorithms.baselines import grid_search, iterates, predict
    from icl_core.common.batch import RegressionProblem
    from icl_core.spec.config import resolve_member

    d, n = 3, 10
    ev = resolve_member({"task": {"name": "linear_regression", "dim": d, "n_points": n,
                                  "layout": "all_prefix"}, "model": {"name": "algoformer"}}).eval

    def prompts(count: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        xs = torch.randn(count, n + 1, d, dtype=torch.float64, generator=g)
        w = torch.randn(count, d, dtype=torch.float64, generator=g)
        ys = torch.einsum("bnd,bd->bn", xs, w)
        return RegressionProblem(xs[:, :n], ys[:, :n], xs[:, n], token=n), ys[:, n]

    held, held_y = prompts(256, 1)
    grid = ev.gd_lr_grid if name == "gd_tuned" else ev.newton_alpha_grid
    step = grid_search(name, [held], [held_y], grid, [HORIZON])[n]
    test, y = prompts(500, 2)
    w = iterates(name, test.X, test.y, step, [HORIZON])[HORIZON]
    return (predict(w, test.x_query) - y).pow(2) / y.pow(2).mean()


def newton_error() -> float:
    """Newton–Schulz's mean squared query error / Var(y) after 30 iterations, noiseless."""
    return float(_fig5_solvers("newton").mean())


def gd_at_machine_precision() -> float:
    """The share of test prompts on which tuned GD is at machine precision after the same 30
    iterations (0: on none)."""
    return float((_fig5_solvers("gd_tuned") <= MACHINE).double().mean())


# ---- the claims, one per row of the verdict table ----------------------------------------

CLAIMS = (
    Claim(id="algoformer.model.gpt2_bodies", paper=PAPER,
          figure="model = GPT2Model bodies, looped",
          quote="we adopt the decoder-based AlgoFormer, standard transformer (GPT-2), and "
                "vanilla looped transformer; TF_post(TF_loop^T(TF_pre(X))) (Eq. 2)",
          source=None, kind="exact", value=0.0, tolerance=1e-10,
          compute="analysis.claims.algoformer:gpt2_bodies_error",
          scale="closed form / construction (float64)", was="fixed and tested"),

    Claim(id="algoformer.examples.lowest", paper=PAPER,
          figure="Fig 2: AlgoFormer lowest error; CoT looped ≫ others",
          quote="the AlgoFormer consistently outperforms both the standard and the vanilla "
                "looped transformer across all tasks; [CoT] both the AlgoFormer and the "
                "standard transformer significantly surpass the vanilla looped transformer",
          source=None, kind="parts",
          parts=tuple(_fig2_part("regression", "AlgoFormer", b, EXAMPLES)
                      for b in ("standard", "looped"))
          + tuple(_fig2_part(task, "AlgoFormer", b, EXAMPLES_CPU)
                  for task in ("AR(3)", "CoT") for b in ("standard", "looped"))
          + (_fig2_part("CoT", "standard", "looped", EXAMPLES_CPU),),
          scale="regression: reduced (d = 3, N = 10, 4000 steps, 5 seeds); AR(3), CoT: cpu "
                "(d = 5, N = 20 / 10, 800 steps, 3 seeds)",
          was="cpu: not testable at this scale; reduced (regression): not testable (did not "
              "survive the re-run)",
          figure_file=FIG2),

    Claim(id="algoformer.loops.window_and_T", paper=PAPER,
          figure="Fig 3: larger ΔT stable beyond T; larger T trains harder",
          quote="a larger ΔT enhances stable long-term inference; larger (T, ΔT) ... challenges "
                "in model training",
          source=None, kind="parts",
          # ΔT = 1 drifts after T, as the criterion was written (docs/REPRODUCTION.md, Fig 3):
          # its error at t = 50 leaves its seed range at t = T, worse: the two iterates' seed
          # ranges, so not paired (paired, each seed's own 1% rise would pass); an overlap is
          # the engine's "unresolved". The ΔT = 4 half, "stays within it", has no kind.
          # Declared until 2026-11-28 as the sign of the per-seed slope from t = T to t = 50,
          # which a curve flat to 1% passed: a bar lower than the one written
          parts=tuple(Claim(id=f"algoformer.loops.drift.T{T}_dT1", paper=PAPER,
                            figure=f"ΔT = 1 drifts after T = {T}", quote="", source=LOOPS,
                            kind="better", statistic=STAT,
                            cells=(_loop_cell(T, 1, T), _loop_cell(T, 1, LAST_LOOP)))
                      for T in (4, 8))
          + tuple(Claim(id=f"algoformer.loops.harder.dT{dT}", paper=PAPER,
                        figure=f"T = 4 below T = 8 (ΔT = {dT}, at t = T)", quote="",
                        source=LOOPS, kind="better", statistic=STAT,
                        cells=(_loop_cell(4, dT), _loop_cell(8, dT)))
                  for dT in (1, 4)),
          scale=REDUCED, was="larger ΔT stable: not reproduced; T = 8 trains harder: not testable",
          figure_file=FIG3),

    Claim(id="algoformer.layers_heads.more_and_vs_standard", paper=PAPER,
          figure="Fig 4: more layers / heads help; AlgoFormer beats standard",
          quote="an increase in both the number of heads and layers leads to lower errors; even "
                "with the same number of layers, the AlgoFormer exhibits better performance",
          source=None, kind="parts",
          parts=tuple(_lh_part(f"layers.h{h}", f"L = 2 < L = 1 (h = {h})", _algo_cell(2, h),
                               _algo_cell(1, h)) for h in (1, 4))
          + tuple(_lh_part(f"heads.L{L}", f"h = 4 < h = 1 (L = {L})", _algo_cell(L, 4),
                           _algo_cell(L, 1)) for L in (1, 2))
          + tuple(_lh_part(f"vs_standard.L{L}", f"AlgoFormer L = {L} < standard {3 * L} layers",
                           _algo_cell(L, 4),
                           Cell(f"standard, {3 * L} layers",
                                {"model.name": "transformer", "model.depth": 3 * L}))
                  for L in (1, 2)),
          scale="reduced: d = 3, N = 10, 4000 steps, 5 seeds (seeds 3-4 of L = 1 and the "
                "standard models from an H100 window, of L = 2 from a CPU); (T, ΔT) = (4, 4); "
                "standard transformers of 3L layers, 4 heads",
          was="AlgoFormer beats standard: not testable (did not survive the re-run); more "
              "layers / heads help: not testable",
          figure_file=FIG4),

    Claim(id="algoformer.vs_newton.baselines", paper=PAPER,
          figure="Fig 5: Newton reaches machine precision, GD slow",
          quote="Newton's method suddenly achieves nearly zero loss (machine precision) later "
                "on, benefiting from its superlinear convergence",
          source=None, kind="parts",
          parts=(Claim(id="algoformer.vs_newton.baselines.newton", paper=PAPER,
                       figure=f"Newton at t = {HORIZON}: squared error / Var(y) <= {MACHINE:g}",
                       quote="", source=None, kind="exact", value=0.0, tolerance=MACHINE,
                       compute="analysis.claims.algoformer:newton_error"),
                 Claim(id="algoformer.vs_newton.baselines.gd", paper=PAPER,
                       figure=f"GD at t = {HORIZON}: at machine precision on no prompt",
                       quote="", source=None, kind="exact", value=0.0, tolerance=0.0,
                       compute="analysis.claims.algoformer:gd_at_machine_precision")),
          scale="closed form (float64; the reduced Fig 5 task: d = 3, N = 10, noiseless, "
                "500 prompts, steps by grid search on 256 held-out prompts)",
          was="reproduced (exact)", figure_file=FIG5),

    Claim(id="algoformer.vs_newton.vs_gd_newton", paper=PAPER,
          figure="Fig 5: AlgoFormer ahead early / better with noise",
          quote="in the noiseless case, the AlgoFormer outperforms both Newton's method and "
                "gradient descent in the beginning stages; with increasing noise levels ... "
                "our method exhibits better performance",
          source=None, kind="parts",
          parts=tuple(_vs_baseline(0.0, t, ref, "early") for t in EARLY for ref in (GD, NEWTON))
          + tuple(_vs_baseline(s, HORIZON, ref, "noise") for s in (0.1, 1.0)
                  for ref in (GD, NEWTON)),
          scale=REDUCED + "; linear regression, all prefixes, (T, ΔT) = (6, 6), loops and "
                "iterations to 30",
          was="ahead early: reproduced (σ = 0); better with noise: not reproduced (σ = 0.1), "
              "not testable (σ = 1)",
          figure_file=FIG5),
)
