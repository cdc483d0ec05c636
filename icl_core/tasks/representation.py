"""The AlgoFormer paper's three in-context tasks with representation (Sec 5.1, Fig 2).

Leaky-ReLU MLPs (`leaky_mlp`, `mlp_forward`): linear layers without biases, He-scaled for a
leaky ReLU (entries ~ N(0, 2 / ((1 + a²) fan_in))), the activation after every hidden layer.
Leaky slope a = 0.01 [gap: the paper is silent; torch's default].

* ``rep_regression``: y_i = A Φ*(x_i) + σ ε_i, x_i ~ N(0, I_d), A ∈ R^{1×d} ~ N(0, I/d) per
  prompt, Φ* a fixed 3-layer leaky-ReLU MLP d → h → h → d drawn from the task seed (linear
  output, rescaled so E|Φ*(x)|² = d). A ~ N(0, I/d) makes Var(Aφ) = 1: the squared error is
  Garg's error normalised by d (the zero predictor scores 1 + σ²). Garg layout, d = 2, N = 2:

      tokens   x1   [y1, 0]   x2   [y2, 0]   x3        targets y1, y2, y3 at the x tokens
      position 0              1              2         (examples seen before)

* ``rep_ar``: AR(q) with representation, x_{t+1} = A φ(x_{t-q+1}, …, x_t) + σ ε_t, A ∈ R^{d×d}
  ~ N(0, I/d) per prompt, Φ* a fixed 3-layer leaky-ReLU MLP qd → h → h → d from the task seed,
  and φ(w) = √d Φ*(w) / |Φ*(w)| (Φ* is positively homogeneous, so this is the representation
  of the window's direction). **Scaling that keeps it bounded** [gap: the paper states none;
  unnormalised, A Φ*(w) is degree-1 homogeneous and a fixed A blows up on some prompts]:
  |x_{t+1}| ≤ √d |A|₂ + σ|ε_t| for every t, whatever the past, while E|x_{t+1}|²/d = 1 + σ²
  keeps the signal at the noise's scale. x_1..x_q ~ N(0, I). Tokens are x_1 … x_{N+q}; token i
  predicts x_{i+2} (vector target), supervised once a window is complete (i ≥ q − 1):

      tokens   x1  x2  x3  x4 …             (q = 3)
      targets  -   -   x4  x5 …             position 0, 1, … (transitions seen before)

* ``cot_mlp``: chain-of-thought with MLPs (Li et al. 2023): per prompt a fresh L-layer leaky-ReLU
  MLP (width d, leaky after every layer), each example the chain x → s¹ → … → s^L (L + 1
  tokens: 7 at the paper's L = 6); every token but the last of an example predicts the next
  state (vector targets). The MLP is resampled per prompt (the ICL reading of Th 3.3):

      tokens   x¹ s¹₁ s¹₂ | x² s²₁ s²₂ | …       (L = 2)
      targets  s¹₁ s¹₂ -  | s²₁ s²₂ -  |         position 0 0 - | 1 1 - (examples before)

  The evaluator averages the tokens that share a position (the chain steps of one example).

Noise σ (`noise_std`): the paper explores σ ∈ {0, 0.1, 1}; targets carry the noise.

Trivial predictors (`icl_core.training.trivial`, from `context_problems`: what a model that did not
learn the representation can still do), on the raw inputs, never the oracle Φ*:
rep_regression: prompt_mean = the mean of the earlier y's; ridge = ridge with an intercept of y
on raw x. rep_ar: prompt_mean = the mean of the earlier transitions' targets x_{q+1..t}; no
ridge (`trivial_ridge = False`): a linear AR(q) on the q·d = 60 window features from at most
N = 40 noisy (σ = 1) transitions nearly interpolates at the fixed small λ and scores worse
than zero (MSE 3.7 vs 2.0 at k = 40), no bar at all. cot_mlp, per
chain step l: prompt_mean = the mean of s^{l+1} over the earlier examples; ridge = a linear
map with an intercept s^l -> s^{l+1} fitted on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from icl_core.algorithms.floor import bayes_predictor
from icl_core.common.device import derive_seed
from icl_core.common.validation import require
from icl_core.tasks.base import (
    Batch,
    RegressionProblem,
    TaskBase,
    TaskConfig,
    all_prefix_positions,
    deinterleave,
    interleave,
    prefix_problems,
)
from icl_core.tasks.draws import DrawnBatches, Draws, GeneratorDraws


def leaky_mlp(sizes: list[int], draws: Draws, slope: float, batch: tuple = (),
              dtype=torch.float64) -> list[torch.Tensor]:
    """Weights (*batch, fan_out, fan_in) of an MLP with layer sizes `sizes`, He-scaled for a
    leaky ReLU of slope `slope`, so E|layer(h)|² = |h|² after each activation (a stack's
    counter draws: K·batch[0] MLPs)."""
    gain = 2.0 / (1.0 + slope ** 2)
    pairs = list(zip(sizes[:-1], sizes[1:], strict=True))
    raw = draws.normals([(*batch, fan_out, fan_in) for fan_in, fan_out in pairs], dtype)
    return [W * (gain / fan_in) ** 0.5 for W, (fan_in, _) in zip(raw, pairs, strict=True)]


def mlp_forward(weights: list[torch.Tensor], x: torch.Tensor, slope: float,
                last_activation: bool = False) -> torch.Tensor:
    """x (..., N, fan_in) through the layers; weights may carry a leading batch dimension."""
    for i, W in enumerate(weights):
        x = x @ W.transpose(-1, -2)
        if i < len(weights) - 1 or last_activation:
            x = F.leaky_relu(x, slope)
    return x


def fixed_representation(sizes: list[int], task_seed: int, slope: float, tag: str,
                         device, dtype) -> list[torch.Tensor]:
    """Φ* from the task seed (drawn on the CPU in float64), its output rescaled so that
    E|Φ*(x)|² = fan_out for x ~ N(0, I) (estimated on 4096 draws of the same seed)."""
    gen = torch.Generator().manual_seed(derive_seed(task_seed, tag))
    weights = leaky_mlp(sizes, GeneratorDraws(gen, None), slope)
    probe = torch.randn(4096, sizes[0], generator=gen, dtype=torch.float64)
    power = mlp_forward(weights, probe, slope).pow(2).sum(-1).mean()
    weights[-1] = weights[-1] * (sizes[-1] / power) ** 0.5
    return [W.to(device=device, dtype=dtype) for W in weights]


def _check(cfg, path: str) -> None:
    for name in ("dim", "n_points", "hidden"):
        value = getattr(cfg, name)
        require(value >= 1, f"{path}.{name}", f"must be >= 1, got {value}")
    require(cfg.noise_std >= 0, f"{path}.noise_std", f"must be >= 0, got {cfg.noise_std}")
    require(0 <= cfg.slope < 1, f"{path}.slope", f"must be in [0, 1), got {cfg.slope}")


@dataclass(frozen=True)
class RepRegressionConfig(TaskConfig):
    name: str = "rep_regression"
    dim: int = 20  # d (paper: 20); Φ* maps R^d -> R^d
    n_points: int = 40  # N in-context examples before the last query (paper: 40)
    hidden: int = 20  # Φ* hidden width [gap: the paper is silent; = d]
    slope: float = 0.01  # leaky-ReLU slope [gap; torch default]
    noise_std: float = 0.0  # σ (paper: 0 in Fig 2a; 0.1, 1 also explored)

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        return self.dim, 1, 2 * self.n_points + 1

    def check(self, path: str) -> None:
        _check(self, path)


class RepRegression(DrawnBatches, TaskBase):
    causal = True

    def __init__(self, cfg: RepRegressionConfig, task_seed: int, device, dtype):
        self.cfg, self.device, self.dtype = cfg, device, dtype
        d, N = cfg.dim, cfg.n_points
        self.phi = fixed_representation([d, cfg.hidden, cfg.hidden, d], task_seed, cfg.slope,
                                        "rep_regression", device, dtype)
        self.prompt_len = N
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        self.positions = all_prefix_positions(N)
        self.mask = self.positions >= 0

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        cfg, B, N = self.cfg, batch_size, self.cfg.n_points
        noisy = cfg.noise_std > 0
        shapes = [(B, N + 1, cfg.dim), (B, cfg.dim)] + [(B, N + 1)] * noisy
        xs, A, *noise = draws.normals(shapes, self.dtype)  # K·B prompts with a stack
        A = A / cfg.dim ** 0.5
        feats = mlp_forward(self.phi, xs, cfg.slope)  # (B, N+1, d)
        ys = torch.einsum("bnd,bd->bn", feats, A)
        if noisy:
            ys = ys + cfg.noise_std * noise[0]
        inputs, targets = interleave(xs, ys)
        return Batch(inputs, targets, self.device_mask,
                     {"xs": xs, "ys": ys, "feats": feats, "A": A})

    def regression_problems(self, batch: Batch) -> list[RegressionProblem]:
        """Least squares on the true representation Φ*(x) (an oracle reference)."""
        feats, ys = batch.extras["feats"], batch.extras["ys"]
        return [RegressionProblem(feats[:, :k], ys[:, :k], feats[:, k], 2 * k)
                for k in range(self.cfg.n_points + 1)]

    def context_problems(self, inputs: torch.Tensor) -> list[RegressionProblem]:
        """The k examples (raw x, y) before each x-token, read from the inputs (trivial
        predictors: ridge on x is what a model that did not learn Φ* can reach)."""
        return prefix_problems(*deinterleave(inputs), self.positions)

    def floor_predictor(self):
        """The floor (icl_core.algorithms.floor): knowing Φ*, y = A·Φ*(x) + σε with A ~ N(0, I/d) is
        Bayesian linear regression on Φ*(x): the posterior mean on the whitened features
        Φ*(x)/√d (A = Ā/√d, Ā ~ N(0, I)), noise σ²; exact (0) once k >= d at σ = 0."""
        cfg = self.cfg
        phi = [W.to(torch.float64) for W in self.phi]
        return bayes_predictor(self, cfg.noise_std ** 2, lambda x: mlp_forward(
            [W.to(x.dtype) for W in phi], x, cfg.slope) / cfg.dim ** 0.5)


@dataclass(frozen=True)
class RepARConfig(TaskConfig):
    name: str = "rep_ar"
    dim: int = 20  # d (paper: 20)
    q: int = 3  # order (paper: 3)
    n_points: int = 40  # N transitions before the last prediction (paper: N = 40 [inferred])
    hidden: int = 20  # Φ* hidden width [gap; = d]
    slope: float = 0.01  # leaky-ReLU slope [gap]
    noise_std: float = 1.0  # σ of ε_t (paper: ε_t ~ N(0, I_d))

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        return self.dim, self.dim, self.n_points + self.q

    def check(self, path: str) -> None:
        _check(self, path)
        require(self.q >= 1, f"{path}.q", f"must be >= 1, got {self.q}")


class RepAR(DrawnBatches, TaskBase):
    causal = True
    trivial_ridge = False  # see the module docstring

    def __init__(self, cfg: RepARConfig, task_seed: int, device, dtype):
        self.cfg, self.device, self.dtype = cfg, device, dtype
        d, q, N = cfg.dim, cfg.q, cfg.n_points
        self.phi = fixed_representation([q * d, cfg.hidden, cfg.hidden, d], task_seed,
                                        cfg.slope, "rep_ar", device, dtype)
        self.prompt_len = N
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        self.positions = torch.arange(N + q) - (q - 1)
        self.positions[: q - 1] = -1
        self.mask = self.positions >= 0

    def features(self, window: torch.Tensor) -> torch.Tensor:
        """φ(w) = √d Φ*(w) / |Φ*(w)| for windows (..., q·d)."""
        f = mlp_forward(self.phi, window, self.cfg.slope)
        return f * self.cfg.dim ** 0.5 / f.norm(dim=-1, keepdim=True).clamp_min(1e-30)

    def rollout(self, A: torch.Tensor, x0: torch.Tensor, steps: int,
                draws: Draws | torch.Generator) -> torch.Tensor:
        """x_1..x_{q+steps} (B, q+steps, d) from the first q values x0 (B, q, d)."""
        if isinstance(draws, torch.Generator):  # a caller's own generator
            draws = GeneratorDraws(draws, self.device)
        cfg = self.cfg
        xs = list(x0.unbind(1))
        for _ in range(steps):
            window = torch.cat(xs[-cfg.q:], dim=-1).unsqueeze(1)  # (B, 1, q·d)
            nxt = torch.einsum("bij,bj->bi", A, self.features(window)[:, 0])
            if cfg.noise_std > 0:
                # (B, d) per member: a stack's nxt holds K·B rows
                eps = draws.normal((nxt.shape[0] // draws.members, *nxt.shape[1:]), self.dtype)
                nxt = nxt + cfg.noise_std * eps
            xs.append(nxt)
        return torch.stack(xs, dim=1)

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        cfg, B = self.cfg, batch_size
        A, x0 = draws.normals([(B, cfg.dim, cfg.dim), (B, cfg.q, cfg.dim)], self.dtype)
        A = A / cfg.dim ** 0.5
        xs = self.rollout(A, x0, cfg.n_points + 1, draws)  # (B, N+q+1, d)
        inputs = xs[:, :-1]
        targets = torch.zeros_like(inputs)
        targets[:, cfg.q - 1:] = xs[:, cfg.q:]  # token i predicts x_{i+2} (1-based)
        return Batch(inputs, targets, self.device_mask, {"xs": xs, "A": A})

    def context_problems(self, inputs: torch.Tensor) -> list[RegressionProblem]:
        """Per supervised token (position k): the k earlier transitions, window (q·d) ->
        next value (d), and the token's own window as the query (trivial predictors)."""
        q, T = self.cfg.q, inputs.shape[1]
        windows = torch.cat([inputs[:, s:s + T - q + 1] for s in range(q)], dim=-1)
        return [RegressionProblem(windows[:, :k], inputs[:, q:q + k], windows[:, k], k + q - 1)
                for k in range(T - q + 1)]

    def floor_predictor(self):
        """The floor (icl_core.algorithms.floor): knowing φ, x_{t+1} = A φ(window) + σε with the rows of
        A ~ N(0, I/d) independent is Bayesian linear regression per output on φ(window)/√d
        (the AR likelihood factorises given the past, so the posterior of A is the
        regression's); its posterior mean from the k earlier transitions."""
        d = self.cfg.dim
        return bayes_predictor(self, self.cfg.noise_std ** 2,
                               lambda w: self.features(w.to(self.dtype)).to(w.dtype) / d ** 0.5)


@dataclass(frozen=True)
class CoTMLPConfig(TaskConfig):
    name: str = "cot_mlp"
    dim: int = 20  # d: width of x and of every state (paper: 20)
    layers: int = 6  # L: MLP layers, so L + 1 tokens per example (paper: 6 -> 7 tokens)
    n_points: int = 40  # N examples before the last one (paper: N = 40)
    slope: float = 0.01  # leaky-ReLU slope [gap]
    noise_std: float = 0.0  # σ added to every state s^l (inputs and targets) [gap: noiseless]

    @property
    def hidden(self) -> int:  # for the shared checks
        return self.dim

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        return self.dim, self.dim, (self.n_points + 1) * (self.layers + 1)

    def check(self, path: str) -> None:
        _check(self, path)
        require(self.layers >= 1, f"{path}.layers", f"must be >= 1, got {self.layers}")


class CoTMLP(DrawnBatches, TaskBase):
    causal = True

    def __init__(self, cfg: CoTMLPConfig, task_seed: int, device, dtype):
        del task_seed  # every prompt draws its own MLP
        self.cfg, self.device, self.dtype = cfg, device, dtype
        L, N = cfg.layers, cfg.n_points
        per = L + 1
        self.prompt_len = N
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        step = torch.arange(self.seq_len) % per  # 0 = x, l = s^l
        self.positions = torch.where(step < L, torch.arange(self.seq_len) // per, -1)
        self.mask = self.positions >= 0

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        cfg, N, L = self.cfg, self.cfg.n_points, self.cfg.layers
        weights = leaky_mlp([cfg.dim] * (L + 1), draws, cfg.slope, (batch_size,), self.dtype)
        x = draws.normal((batch_size, N + 1, cfg.dim), self.dtype)
        B = x.shape[0]  # K·B with a stack's draws (DrawnBatches)
        states = [x]
        for W in weights:
            states.append(F.leaky_relu(states[-1] @ W.transpose(-1, -2), cfg.slope))
        chain = torch.stack(states, dim=2)  # (B, N+1, L+1, d)
        if cfg.noise_std > 0:
            chain = torch.cat([chain[:, :, :1], chain[:, :, 1:] + cfg.noise_std
                               * draws.normal((batch_size, N + 1, L, cfg.dim), self.dtype)],
                              dim=2)
        inputs = chain.reshape(B, self.seq_len, cfg.dim)
        targets = torch.zeros_like(chain)
        targets[:, :, :L] = chain[:, :, 1:]  # each state predicts the next
        targets = targets.reshape(B, self.seq_len, cfg.dim)
        return Batch(inputs, targets, self.device_mask,
                     {f"mlp_{i}": W for i, W in enumerate(weights)})

    def context_problems(self, inputs: torch.Tensor) -> list[RegressionProblem]:
        """Per supervised token (example n, chain step l): the earlier examples' pairs
        (s^l, s^{l+1}) and the token's own s^l as the query (trivial predictors)."""
        L, per = self.cfg.layers, self.cfg.layers + 1
        chain = inputs.reshape(inputs.shape[0], -1, per, inputs.shape[-1])  # (P, N+1, L+1, d)
        return [RegressionProblem(chain[:, :n, step], chain[:, :n, step + 1], chain[:, n, step],
                                  n * per + step)
                for n in range(chain.shape[1]) for step in range(L)]
