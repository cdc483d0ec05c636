"""The floor: the error of the best predictor that knows the task's law (not a non-learner).

A task whose targets are linear in known features with a Gaussian prior, y = vᵀf(x) + σε with
v ~ N(0, I) per prompt (after whitening the prior: w = L v for w ~ N(0, LLᵀ), features xL),
has a closed-form best predictor under squared error: the Bayes posterior mean

    v̂ = (FᵀF + σ² I)⁻¹ FᵀY = Fᵀ(FFᵀ + σ² I)⁻¹ Y        (F: the k in-context features)

i.e. ridge with λ = σ² on the summed loss, no intercept, fitted on the examples before each
token, predicting f(x_query)ᵀv̂; no predictor has a lower expected squared error on the same
prompts. At σ = 0 it is the minimum-norm interpolant (exact once the k examples span the
features: floor 0; below that, the prior's unexplained part, e.g. d − k for w, x ~ N(0, I)).
The tasks say their own features and prior (`floor_predictor`); the evaluator
(`icl_core.training.evaluate.floor_rows`) measures the result like the model, on the same test
prompts and through the same code as the trivial predictors, as rows with
`predictor = "floor"`. A task without `floor_predictor` has floor 0 error (R² 1) in the
learned-regime check (analysis.reading.regime): exact for noiseless tasks whose law k examples
determine, optimistic (a lower bound) otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

FLOOR = "floor"  # the predictor name of floor rows

Predict = Callable[[torch.Tensor], torch.Tensor]


def posterior_mean(F: torch.Tensor, Y: torch.Tensor, f_query: torch.Tensor,
                   noise_var: float) -> torch.Tensor:
    """Bayes posterior mean prediction (P, O) at f_query (P, D) from k examples F (P, k, D),
    Y (P, k, O), coefficients ~ N(0, I) a priori, noise variance `noise_var` (module doc). Solves
    the smaller of the primal (D x D) and dual (k x k) systems; at σ = 0 the pseudo-inverse
    (the minimum-norm interpolant). 0 when k = 0."""
    P, k, D = F.shape
    if k == 0:
        return Y.new_zeros(P, Y.shape[-1])
    Ft = F.transpose(1, 2)
    dual = k <= D
    gram = F @ Ft if dual else Ft @ F  # (P, m, m)
    m = gram.shape[-1]
    if noise_var > 0:
        gram = gram + noise_var * torch.eye(m, dtype=F.dtype, device=F.device)
        chol = torch.linalg.cholesky(gram)
        solve = lambda rhs: torch.cholesky_solve(rhs, chol)  # noqa: E731
    else:
        inv = torch.linalg.pinv(gram, hermitian=True)
        solve = lambda rhs: inv @ rhs  # noqa: E731
    coef = Ft @ solve(Y) if dual else solve(Ft @ Y)  # (P, D, O)
    return (f_query.unsqueeze(1) @ coef)[:, 0]


def bayes_predictor(task, noise_var: float,
                    features: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Predict:
    """The floor predictor of a task with `context_problems`: at every supervised token the
    posterior mean from the examples before it, on `features(x)` (whitened: coefficients
    ~ N(0, I); None: x itself). inputs (P, T, d_in) -> outputs (P, T, d_out)."""
    feat = features or (lambda x: x)

    def predict(inputs: torch.Tensor) -> torch.Tensor:
        out = inputs.new_zeros(inputs.shape[0], inputs.shape[1], task.d_out)
        for p in task.context_problems(inputs):
            Y = p.y.unsqueeze(-1) if p.y.ndim == 2 else p.y
            out[:, p.token] = posterior_mean(feat(p.X), Y, feat(p.x_query), noise_var)
        return out

    return predict
