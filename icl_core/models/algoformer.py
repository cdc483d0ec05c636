"""AlgoFormer (Eq. 2 of the AlgoFormer paper): a pre-transformer, a looped transformer and a
post-transformer, each of `layers` GPT-2 layers (paper experiments: 1 each; Fig 4 varies L
and heads).

    e     = G_pre(read_in(x))
    z_0   = 0;   z_t = G_loop(z_{t-1} + e)
    ŷ_t   = read_out(G_post(z_t))

The looped transformer with `pre_post_layers = layers`: the model class, its loop, window loss
and curriculum are those of icl_core.models.looped (Looped), where every symbol is explained.
"""

from __future__ import annotations

from dataclasses import dataclass

from icl_core.models.looped import LoopedConfig


@dataclass(frozen=True)
class AlgoFormerConfig(LoopedConfig):
    """AlgoFormer: pre-transformer, looped transformer and post-transformer, each of `layers`
    layers (paper experiments: 1 each; Fig 4 varies L and heads)."""

    name: str = "algoformer"

    @property
    def pre_post_layers(self) -> int:
        return self.layers
