"""How long a plan takes on a cluster: trials placed as Ray places them, in the order given.

Each trial asks for a share of one device (a GPU fraction, or CPUs of a node); a share must fit
on one device, as Ray's placement of a fractional GPU must. Trials start in order whenever a
device has room (a trial that does not fit waits, and so do those after it: Tune starts
pending trials in order); each takes its estimated seconds plus a start-up. The lower bound
of any schedule is max(total work / devices, longest trial).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    makespan_s: float
    work_s: float  # sum over trials of seconds x share (device-seconds)
    lower_bound_s: float
    devices: int

    @property
    def utilisation(self) -> float:
        return self.work_s / (self.devices * self.makespan_s) if self.makespan_s else 0.0


def lower_bound(trials: list[tuple[float, float]], devices: int) -> float:
    """max(total work / devices, longest trial) for (seconds, share) trials."""
    if not trials:
        return 0.0
    return max(sum(s * share for s, share in trials) / devices, max(s for s, _ in trials))


def place(trials: list[tuple[float, float]], devices: int, startup_s: float = 0.0) -> Schedule:
    """Makespan of (seconds, share of one device) trials started in the given order on
    `devices` devices of capacity 1 (first fit: the lowest-numbered device with room)."""
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    free = [1.0] * devices
    running: list[tuple[float, int, float]] = []  # (end time, device, share)
    now, end = 0.0, 0.0
    eps = 1e-9
    for seconds, share in trials:
        share = min(max(share, 0.0), 1.0)
        while True:
            fit = next((d for d in range(devices) if free[d] + eps >= share), None)
            if fit is not None:
                break
            now, device, released = heapq.heappop(running)
            free[device] += released
        free[fit] -= share
        finish = now + startup_s + seconds
        heapq.heappush(running, (finish, fit, share))
        end = max(end, finish)
    work = sum(s * min(max(share, 0.0), 1.0) for s, share in trials)
    bound = lower_bound([(s + startup_s, share) for s, share in trials], devices)
    return Schedule(end, work, bound, devices)
