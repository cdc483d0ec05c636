"""Device and dtype from config and availability; nothing is hard-coded to CUDA."""

from __future__ import annotations

import contextlib
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


# train.precision: how a float32 member's training steps compute; evaluation never changes
PRECISIONS = ("fp32", "tf32", "bf16")


@contextlib.contextmanager
def precision_scope(precision: str, device: torch.device):
    """Training steps under `precision`: "fp32" in full float32 (CUDA's TF32 switches off,
    cuDNN's too, which torch leaves on for convolutions); "tf32" with TF32 matmuls and
    convolutions allowed (a no-op on a CPU); "bf16" under bfloat16 autocast (on the member's
    device type) without autocast's weight cache, which would keep the first step's bf16 copy
    of each weight for every step of the scope. The global TF32 flags are restored after.
    Evaluation runs under `full_float32` whatever the training precision."""
    if precision == "tf32":
        with tf32_flags((True, True)):
            yield
        return
    with full_float32(device):
        if precision == "bf16":
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                                cache_enabled=False):
                yield
            return
        yield


def full_float32(device: torch.device):
    """CUDA's TF32 switches (matmuls, cuDNN convolutions) off for the block on a CUDA device,
    restored after; elsewhere nothing (they switch nothing there)."""
    return tf32_flags((False, False)) if device.type == "cuda" else contextlib.nullcontext()


@contextlib.contextmanager
def tf32_flags(allowed: tuple[bool, bool]):
    """CUDA's TF32 switches (matmul, cudnn) set to `allowed`, restored after."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def host_copy(state):
    """A copy of a (checkpoint) state whose tensors are CPU copies, its dicts and lists new
    (a resume moves the tensors back to the device)."""
    return torch.utils._pytree.tree_map(
        lambda v: v.detach().to("cpu", copy=True) if torch.is_tensor(v) else v, state)


def derive_seed(*parts) -> int:
    """A 63-bit seed from parts, e.g. derive_seed(seed, "data"): independent RNG streams."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def constant(make, *key) -> torch.Tensor:
    """`make(*key)`, made once per key (a length, a device, ...: hashable values, never a
    tensor) and kept: a step reads it and launches nothing to build it (a compiled graph
    folds its own). The causal mask, the positions' indices, the counter draws' spread.
    Never evicted: a captured step replays with its constants, unseen. One first met inside
    a CUDA graph's capture is not kept: its kernels were only recorded (the graph makes it
    at each replay), so an eager reader would find memory nothing has written yet."""
    if torch.compiler.is_compiling():
        return make(*key)
    kept = _KEPT.get((make, key))
    if kept is None:
        with torch.inference_mode(False):  # made under inference mode, no backward could save it
            kept = make(*key)
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return kept
        _KEPT[make, key] = kept
    return kept


_KEPT: dict[tuple, torch.Tensor] = {}
