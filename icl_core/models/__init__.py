"""Model registry: every architecture by short name, built with (d_in, d_out, max_len, causal)."""

import functools

import torch

from icl_core.common.registry import Registry
from icl_core.models.algoformer import AlgoFormerConfig
from icl_core.models.attention_mlp import AttentionMLP, AttentionMLPConfig
from icl_core.models.base import ModelBase, ModelConfig, num_params
from icl_core.models.baseconv_gd import BaseConvGD, BaseConvGDConfig
from icl_core.models.bigru import BiGRU, BiGRUConfig
from icl_core.models.ffn import FFN, FFNConfig
from icl_core.models.looped import Looped, LoopedConfig
from icl_core.models.lsa import LSA, LSAConfig
from icl_core.models.mha_mlp import MHAMLP, MHAMLPConfig
from icl_core.models.mixers import MIXERS
from icl_core.models.transformer import Transformer, TransformerConfig

MODELS = Registry("model")
MODELS.register("transformer", TransformerConfig)(Transformer)
MODELS.register("lsa", LSAConfig)(LSA)
MODELS.register("baseconv_gd", BaseConvGDConfig)(BaseConvGD)
# sparse token retrieval (Mousavi-Hosseini et al.): transformer (theory / peer code), FFN, RNN
MODELS.register("attention_mlp", AttentionMLPConfig)(AttentionMLP)
MODELS.register("mha_mlp", MHAMLPConfig)(MHAMLP)
MODELS.register("ffn", FFNConfig)(FFN)
MODELS.register("bigru", BiGRUConfig)(BiGRU)
# AlgoFormer paper: looped transformer (Yang et al.) and pre + looped + post
MODELS.register("looped", LoopedConfig)(Looped)
MODELS.register("algoformer", AlgoFormerConfig)(Looped)


def build_model(cfg, *, d_in: int, d_out: int, max_len: int, causal: bool, device, dtype):
    """Instantiate a resolved model config on a device and dtype."""
    model = MODELS.build(cfg, d_in=d_in, d_out=d_out, max_len=max_len, causal=causal)
    return model.to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=4096)
def count_params(cfg, *, d_in: int, d_out: int, max_len: int, causal: bool) -> int:
    """`num_params` of the model a resolved (frozen, hashable) config builds, built on the
    meta device (shapes only: no memory): what the planner counts without weights."""
    with torch.device("meta"):
        model = MODELS.build(cfg, d_in=d_in, d_out=d_out, max_len=max_len, causal=causal)
    return num_params(model)


__all__ = ["MIXERS", "MODELS", "ModelBase", "ModelConfig", "build_model", "count_params",
           "num_params"]
