"""Device and dtype from config and availability; nothing is hard-coded to CUDA."""

from __future__ import annotations

import hashlib

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda if available, else cpu; anything else is taken as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def derive_seed(*parts) -> int:
    """A 63-bit seed from parts, e.g. derive_seed(seed, "data"): independent RNG streams."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)
