"""Random draws for training batches: a member's generator, or counters hashed for a whole stack.

A task builds a batch from `Draws`: `normal`, `normals` (several shapes, one call), `uniform`
and `integers`, each shape led by the prompt axis B. Two kinds:

* `GeneratorDraws` (train.draws = "generator", the default): torch's own `randn` / `rand` /
  `randint` on the member's `torch.Generator`, call for call what the tasks drew before this
  module existed (so every existing config keeps its numbers). One member per call;
  `MembersGeneratorDraws` lays a stack's members' own draws along the prompt axis, as
  counter draws do, so a task's batch code runs once for the stack.
* `CounterDraws` (train.draws = "counter"): no state. Element i of the c-th call at optimizer
  step s of the member with key k (its data seed, `derive_seed(seed, "data")`) is a pure
  function h(k, s, c, i) of 32-bit integer hashes, computed in int64 tensors on the draws'
  device for all K members at once. A call for shape (B, ...) returns (K·B, ...): the
  members laid along the prompt axis, member-major, so a task's batch code runs unchanged
  on the K·B prompts and `stacked` folds the result to (K, B, ...). The numbers a member
  draws do not depend on K, on its place in the stack or on what was drawn before (a
  resumed run redraws the same batches without saving any state), and the aten operations
  of a call do not grow with K.

The hash: per member and call, two 32-bit stream words (a, b) are mixed from the key's two
halves, the step and the call index; element i's word is mix₂(mix₁(i·φ + a) ^ b), where mix₁
and mix₂ are two of C. Wellons' 32-bit integer finalisers (hash-prospector: lowbias32 and
the [16 21f0aaad 15 735a2d97 15] one), each a bijection of 32-bit words. A 32-bit word times a
constant is taken by the constant's 16-bit halves, so no int64 product exceeds 2⁴⁸, and the
spread i·φ stays below 2⁶³ for the i < 2³¹ elements a call may draw (no signed overflow on any
device).
Uniforms on [0, 1): 53 bits (two words) for float64, 24 bits (one word) otherwise; normals by
Box–Muller (both outputs of a pair used), computed in float64 for float64 and in float32
otherwise; integers in [0, high) by multiply-shift (Lemire), bias below high / 2³².
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch

from icl_core.common.batch import Batch
from icl_core.common.device import constant

DRAWS = ("generator", "counter")  # train.draws: how online training batches are drawn
M32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9  # 2³² / φ: spreads consecutive element indices before the first mix
SALTS = (0x243F6A88, 0x85A308D3)  # the two stream words' salts (π's first hex digits)


@runtime_checkable
class Draws(Protocol):
    """What a task's batch code draws from; shapes lead with the prompt axis B, and a call
    returns `members`·B prompts (member-major)."""

    members: int

    def normal(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor: ...

    def normals(self, shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[torch.Tensor]:
        ...

    def uniform(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor: ...

    def integers(self, high: int, shape: tuple[int, ...]) -> torch.Tensor: ...


class GeneratorDraws:
    """torch's draws on one member's generator, on `device` (the numbers of `task.sample`)."""

    members = 1

    def __init__(self, generator: torch.Generator, device: torch.device):
        self.generator, self.device = generator, device

    def normal(self, shape, dtype):
        return torch.randn(*shape, generator=self.generator, device=self.device, dtype=dtype)

    def normals(self, shapes, dtype):
        return [self.normal(shape, dtype) for shape in shapes]  # in order: one after another

    def uniform(self, shape, dtype):
        return torch.rand(*shape, generator=self.generator, device=self.device, dtype=dtype)

    def integers(self, high, shape):
        return torch.randint(0, high, shape, generator=self.generator, device=self.device)


class MembersGeneratorDraws:
    """The K members' own generators, each drawing exactly what it draws alone (the same calls
    in the same order), laid member-major along the prompt axis as `CounterDraws` lays its
    members: a call for shape (B, ...) returns (K·B, ...), so a task's batch code runs once on
    the K·B prompts (not once a member) and `stacked` folds the result. Only the draws
    themselves (one a member and call, each into its member's rows) grow with K."""

    def __init__(self, generators: list[torch.Generator], device: torch.device):
        self.generators, self.members, self.device = generators, len(generators), device

    def _drawn(self, shapes, dtype, fill) -> list[torch.Tensor]:
        """Each member's draws of `shapes` (its shapes in order) in (K·B, ...) tensors, member
        k's rows k·B to (k + 1)·B filled in place by `fill(rows, generator)`: what torch's
        randn, rand and randint do to the tensor they make, so the same numbers (tested)."""
        outs = [torch.empty(self.members, *shape, dtype=dtype, device=self.device)
                for shape in shapes]
        rows = [out.unbind(0) for out in outs]  # one operation a call, not one a member
        for k, generator in enumerate(self.generators):
            for each in rows:
                fill(each[k], generator)
        return [out.flatten(0, 1) for out in outs]

    def normal(self, shape, dtype):
        return self.normals([shape], dtype)[0]

    def normals(self, shapes, dtype):
        return self._drawn(shapes, dtype, lambda rows, g: rows.normal_(generator=g))

    def uniform(self, shape, dtype):
        return self._drawn([shape], dtype, lambda rows, g: rows.uniform_(generator=g))[0]

    def integers(self, high, shape):
        return self._drawn([shape], torch.int64,
                           lambda rows, g: rows.random_(0, high, generator=g))[0]


def _mul32(x, c: int):
    """x·c mod 2³² for 32-bit x (an int64 tensor or an int) and a 32-bit constant c: x times
    each 16-bit half of c stays below 2⁴⁸, so int64 never overflows (six operations)."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & M32


def _xorshift_multiply(x, first: int, second: int, last: int):
    """[16 first 15 second last] in hash-prospector's notation: xor-shifts and multiplies,
    a bijection of 32-bit words."""
    x = x ^ (x >> 16)
    x = _mul32(x, first)
    x = x ^ (x >> 15)
    x = _mul32(x, second)
    return x ^ (x >> last)


def _mix1(x):
    """lowbias32 (Wellons): a bijection of 32-bit words with low avalanche bias."""
    return _xorshift_multiply(x, 0x7FEB352D, 0x846CA68B, 16)


def _mix2(x):
    """hash-prospector's [16 21f0aaad 15 735a2d97 15]: a second, independent bijection."""
    return _xorshift_multiply(x, 0x21F0AAAD, 0x735A2D97, 15)


def _spread(n: int, device: torch.device) -> torch.Tensor:
    """(n,) int64: i·φ mod 2³² in one product (i < 2³¹ and φ < 2³², so below 2⁶³)."""
    return (torch.arange(n, device=device, dtype=torch.int64) * GOLDEN) & M32


class CounterDraws:
    """Counter-based draws of K members at optimizer step `step`: `keys` (K,) int64 (each
    member's data seed, < 2⁶³) on the device the draws land on; each call takes the next
    call index (0, 1, ...), so successive draws of a step are independent. `step` is an int,
    or a 0-dim int64 tensor on that device (a step captured as a CUDA graph reads it there:
    the same numbers, a few more operations)."""

    def __init__(self, keys: torch.Tensor, step: int):
        self.keys, self.step, self.calls = keys, step, 0
        self.members = keys.shape[0]
        self.device = keys.device
        self._halves = (keys & M32, (keys >> 32) & M32)  # (K,) each
        self._step_halves = (step & M32, (step >> 32) & M32)  # once a step, not a call

    def _streams(self) -> torch.Tensor:
        """This step's and call's two 32-bit stream words per member, (2, K, 1): one per salt,
        both mixed in the same operations (a tensor step: on the device)."""
        salted = [_mix2(salt ^ self.calls) for salt in SALTS]  # host ints: no aten ops
        lo, hi = self._halves
        step_lo, step_hi = self._step_halves
        if torch.is_tensor(self.step):
            s = _mix2(_mix1(torch.stack([step_lo ^ h for h in salted])) ^ step_hi)  # (2,)
            mixed = lo ^ s[:, None]  # (2, K)
        else:
            s = [_mix2(_mix1(h ^ step_lo) ^ step_hi) for h in salted]
            mixed = torch.stack([lo ^ word for word in s])  # (2, K)
        return _mix2(_mix1(mixed) ^ hi).unsqueeze(2)

    def words(self, n: int) -> torch.Tensor:
        """(K, n) int64 words in [0, 2³²): one call (the call index advances); n < 2³¹."""
        if n >= 2**31:
            raise ValueError(f"a counter draw of {n} words: at most 2**31 - 1 a call")
        a, b = self._streams()
        self.calls += 1
        # the first n of a kept table whose size is a power of two: every call's n reads one
        # of a few tables a device (at most twice the largest n each), not one kept per n
        spread = constant(_spread, 1 << max(n - 1, 1).bit_length(), self.device)[:n]
        return _mix2(_mix1((spread + a) & M32) ^ b)

    def _uniform_flat(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """(K, n) uniforms on [0, 1): 53 bits in float64, 24 bits in float32 (`dtype` is the
        dtype they are computed in)."""
        if dtype == torch.float64:
            w = self.words(2 * n).view(-1, n, 2)
            m = ((w[..., 0] >> 11) << 32) | w[..., 1]  # 21 + 32 bits
            return m.to(torch.float64) * 2.0 ** -53
        return (self.words(n) >> 8).to(torch.float32) * 2.0 ** -24

    def _shaped(self, flat_KxN: torch.Tensor, shape) -> torch.Tensor:
        return flat_KxN.reshape(self.members * shape[0], *shape[1:])

    def uniform(self, shape, dtype):
        work = torch.float64 if dtype == torch.float64 else torch.float32
        return self._shaped(self._uniform_flat(math.prod(shape), work).to(dtype), shape)

    def normals(self, shapes, dtype):
        """Normals of several shapes from one call (one hash over all their elements)."""
        sizes = [math.prod(shape) for shape in shapes]
        n = sum(sizes)
        pairs = (n + 1) // 2
        work = torch.float64 if dtype == torch.float64 else torch.float32
        u = self._uniform_flat(2 * pairs, work)  # (K, 2p)
        radius = torch.sqrt(-2.0 * torch.log1p(-u[:, :pairs]))  # 1 - u in (0, 1]
        angle = (2 * math.pi) * u[:, pairs:]
        z = torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)[:, :n]
        parts = torch.split(z.to(dtype), sizes, dim=1)
        return [self._shaped(p, shape) for p, shape in zip(parts, shapes, strict=True)]

    def normal(self, shape, dtype):
        return self.normals([shape], dtype)[0]

    def integers(self, high, shape):
        """int64 in [0, high) (high < 2³¹): (word · high) >> 32."""
        return self._shaped((self.words(math.prod(shape)) * high) >> 32, shape)


class DrawnBatches:
    """A task whose batch code draws from a `Draws` (its `_draw(batch_size, draws)`): `sample`
    on a member's generator; for a stack's K members at once, folded to (K, B, ...),
    `sample_counter` (icl_core.tasks.base.DrawsByCounter) and `sample_members` (their
    generators)."""

    device: torch.device

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        raise NotImplementedError

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        return self._draw(batch_size, GeneratorDraws(generator, self.device))

    def sample_counter(self, batch_size: int, draws: CounterDraws) -> Batch:
        """DrawsByCounter: the K members' batches, (K, B, ...)."""
        return stacked(self._draw(batch_size, draws), draws.members)

    def sample_members(self, batch_size: int, generators: list[torch.Generator]) -> Batch:
        """The batches K members of this one task (its config and seed) draw alone on their
        generators, (K, B, ...), the batch code run once on the K·B prompts."""
        return stacked(self._draw(batch_size, MembersGeneratorDraws(generators, self.device)),
                       len(generators))


def stacked(batch: Batch, members: int) -> Batch:
    """A batch drawn with `members`·B prompts, its tensors folded to (K, B, ...); the mask
    (T,) is shared."""
    def fold(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(members, t.shape[0] // members, *t.shape[1:])

    return Batch(fold(batch.inputs), fold(batch.targets), batch.mask,
                 {k: fold(v) for k, v in batch.extras.items()})


def member_batch(batch: Batch, k: int) -> Batch:
    """Member k's (B, ...) batch out of a stacked (K, B, ...) one."""
    return Batch(batch.inputs[k], batch.targets[k], batch.mask,
                 {name: v[k] for name, v in batch.extras.items()})
