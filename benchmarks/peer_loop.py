"""The peers' training loop, a measuring stick: one model per process, a Hugging Face GPT-2
backbone trained as peer code trains it (benchmarks/perf.py part a; stack_scaling.py --peer).

Read-in Linear -> `transformers.GPT2Model` fed `inputs_embeds` (dropout 0, no cache) ->
read-out Linear; every step samples the batch on the CPU from the project's task and moves it
to the device, then forward, masked MSE, zero_grad, backward, Adam and `loss.item()` (peers
log the loss every step). Needs `pip install transformers` (not a project dependency; the
lent GPU machines have it). Torch and the project's tasks only otherwise: no Ray.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from icl_core.spec.config import MemberConfig
from icl_core.tasks import Batch, build_task, masked_mse


def transformers_version() -> str | None:
    """The installed transformers' version; None where it is missing."""
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


class PeerNet(nn.Module):
    """Read-in, a Hugging Face GPT-2 backbone fed embeddings, read-out (peer style)."""

    def __init__(self, d_in: int, d_out: int, n_positions: int, depth: int, width: int,
                 heads: int, activation: str):
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        config = GPT2Config(n_positions=n_positions, n_embd=width, n_layer=depth, n_head=heads,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                            activation_function=activation)
        self.embed = nn.Linear(d_in, width)
        self.backbone = GPT2Model(config)
        self.head = nn.Linear(width, d_out)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(inputs_embeds=self.embed(tokens)).last_hidden_state
        return self.head(hidden)


class Peer:
    """A peer-style trainer of `member`'s task and model shape: CPU sampling, a host transfer
    and a loss read every step."""

    def __init__(self, member: MemberConfig, activation: str, device: torch.device):
        self.name = f"GPT2 {activation}"
        self.device = device
        cfg = member.train
        self.batch_size = cfg.batch_size
        self.task = build_task(member.task, member.task_seed, torch.device("cpu"), torch.float32)
        depth, width, heads = member.model.depth, member.model.width, member.model.heads
        torch.manual_seed(member.seed)
        self.model = PeerNet(self.task.d_in, self.task.d_out, self.task.seq_len, depth, width,
                             heads, activation).to(device)
        self.attn = getattr(self.model.backbone.config, "_attn_implementation", None)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                          betas=tuple(cfg.betas), eps=cfg.eps)
        self.gen = torch.Generator().manual_seed(member.seed + 1)
        self.model.train()

    def steps(self, n: int) -> float:
        loss_value = float("nan")
        for _ in range(n):
            cpu = self.task.sample(self.batch_size, self.gen)
            batch = Batch(cpu.inputs.to(self.device), cpu.targets.to(self.device),
                          cpu.mask.to(self.device))
            loss = masked_mse(self.model(batch.inputs), batch)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            loss_value = loss.item()
        return loss_value


def time_peer(member: MemberConfig, device: torch.device, warmup: int, steps: int) -> dict:
    """The peer loop (GPT-2 as peers run it, `gelu_new`) on `member`'s task and shape: ms per
    step and member-steps/s (one model: one member a step), timed after `warmup` steps (its
    every step ends in a host read, so the clock needs no synchronisation of its own)."""
    peer = Peer(member, "gelu_new", device)
    peer.steps(warmup)
    t0 = time.perf_counter()
    loss = peer.steps(steps)
    seconds = (time.perf_counter() - t0) / steps
    return {"ms_per_step": 1e3 * seconds, "member_steps_per_s": 1 / seconds,
            "attn_implementation": peer.attn, "last_loss": loss}
