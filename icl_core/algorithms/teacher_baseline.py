"""ReLU-network teachers, batched over prompts, and the trained-teacher baseline (Wu et al. 2024).

A network of depth N and width K is a list of N weight stacks, one network per prompt:

    weights[0]  (P, K, d)    weights[1..N-2]  (P, K, K)    weights[N-1]  (P, 1, K)
    f(x) = W_N relu(W_{N-1} ... relu(W_1 x))       no biases, linear scalar output

He scaling: every entry ~ N(0, 2 / fan_in) (Garg et al.'s relu_2nn scales its output layer the
same way [code]), so E[f(x)^2] = 2 |x|^2 / d over teachers, at every depth.

The baseline ("training with prompt samples", App. G): for each test prompt and each k, a fresh
network of the teacher's class is trained on the prompt's first k examples and predicts the
(k+1)-th. All P networks train at once as stacked weights with batched matmuls: the loss is
the sum over prompts of each prompt's own mean squared error, and Adam is elementwise, so each
network follows exactly the trajectory it would follow alone (tests check this to 1e-10).
Paper silent [gap] on optimizer, learning rate, batching and init; we use Adam (torch
defaults, lr 1e-3), full batch (one epoch = one step), the teacher's own He-normal init.
"""

from __future__ import annotations

import torch


def he_network(P: int, dim: int, hidden: int, depth: int, generator: torch.Generator,
               device=None, dtype=torch.float32) -> list[torch.Tensor]:
    """P independent networks of `depth` linear layers, entries ~ N(0, 2 / fan_in)."""
    opts = dict(generator=generator, device=device, dtype=dtype)
    return [torch.randn(*shape, **opts) * std for shape, std in he_layers(P, dim, hidden, depth)]


def he_layers(P: int, dim: int, hidden: int, depth: int) -> list[tuple[tuple[int, ...], float]]:
    """The layers of `he_network`, first to last: (shape (P, fan_out, fan_in), He std)."""
    sizes = [dim] + [hidden] * (depth - 1) + [1]
    return [((P, fan_out, fan_in), (2.0 / fan_in) ** 0.5)
            for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True)]


def network_forward(weights: list[torch.Tensor], x_PxNxD: torch.Tensor) -> torch.Tensor:
    """f_p(x_pn) for every prompt p and point n: (P, N)."""
    h = x_PxNxD
    for W in weights[:-1]:
        h = torch.relu(h @ W.transpose(1, 2))  # (P, N, K)
    return (h @ weights[-1].transpose(1, 2)).squeeze(-1)


def train_networks(X_PxKxD: torch.Tensor, y_PxK: torch.Tensor, x_query_PxD: torch.Tensor,
                   init: list[torch.Tensor], epochs: int, lr: float) -> torch.Tensor:
    """Train the P networks `init` (copied, not changed) by full-batch Adam on (X, y); return
    the query predictions after every epoch 0..epochs: (epochs + 1, P)."""
    with torch.enable_grad():  # the evaluator runs under no_grad
        return _train(X_PxKxD, y_PxK, x_query_PxD, init, epochs, lr)


def _train(X_PxKxD, y_PxK, x_query_PxD, init, epochs, lr) -> torch.Tensor:
    weights = [W.detach().clone().requires_grad_(True) for W in init]
    optimizer = torch.optim.Adam(weights, lr=lr)
    x_query = x_query_PxD.unsqueeze(1)  # (P, 1, D)
    preds = []
    for epoch in range(epochs + 1):
        with torch.no_grad():
            preds.append(network_forward(weights, x_query)[:, 0])
        if epoch == epochs:
            break
        loss = (network_forward(weights, X_PxKxD) - y_PxK).pow(2).mean(1).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return torch.stack(preds)


def pooled_r2(pred_PxM: torch.Tensor, target_PxM: torch.Tensor) -> torch.Tensor:
    """R² per column over all prompts: 1 - Σ(ŷ - y)² / Σ(y - ȳ)², (M,) (digest §6)."""
    resid = (pred_PxM - target_PxM).pow(2).sum(0)
    total = (target_PxM - target_PxM.mean(0)).pow(2).sum(0)
    return 1 - resid / total


def batch_mean_r2(pred_PxM: torch.Tensor, target_PxM: torch.Tensor, batch: int) -> torch.Tensor:
    """The mean over consecutive batches of `batch` prompts of each batch's pooled R², (M,)
    (the paper's "64 samples per batch x 100 batches" reading; a short last batch is dropped
    unless it is the only one)."""
    n = max(1, pred_PxM.shape[0] // batch)
    size = batch if pred_PxM.shape[0] >= batch else pred_PxM.shape[0]
    r2s = [pooled_r2(pred_PxM[i * size:(i + 1) * size], target_PxM[i * size:(i + 1) * size])
           for i in range(n)]
    return torch.stack(r2s).mean(0)
