"""Delay scheduling: wait a little for a device near the input, or take a remote one now?

A ranking whose query says where its input is (:mod:`predictor.service.live.transfers`) splits
its candidates into **local** ones (the input is on the device or its host: no network
hop) and **remote** ones. When the best local device is busy (it has a queue wait), the
answer compares

* waiting for it: its expected queue wait, no transfer, then its latency, with
* the best remote device now: its transfer time (and its own wait, if any), then its latency,

and says which, and why (:class:`~predictor.service.types.DelayDecision`). The **delay
limit** ``T`` is how long to wait for the local device before giving up on it:

* from the queue dynamics observed: the ``quantile`` (0.9 by default) of the queue waits
  seen on the local device (queued to started; pooled over all devices when it has too few),
  so a device whose queue moves slower than usual is not waited for (delay scheduling, with
  the timer tuned online rather than set by hand);
* capped at the **break-even** delay: the remote device's expected completion less the local
  device's without its wait, beyond which waiting can no longer pay.

The choice is ``wait_local`` when the expected local wait is within ``T`` (then waiting
beats going remote), ``remote_now`` otherwise (or when only the remote device meets the
deadline), ``local_now`` when the best local device has no wait, and ``remote_now`` when no
local candidate fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from predictor.service.types import DelayDecision

WaitQuantile = Callable[[Sequence[str], float], tuple[float | None, int]]


def decide(
    devices: Sequence[str],
    local: np.ndarray,
    fits: np.ndarray,
    wait_ms: np.ndarray,
    transfer_ms: np.ndarray,
    completion_ms: np.ndarray,
    slack_ms: np.ndarray,
    observed_wait: WaitQuantile,
    quantile: float = 0.9,
) -> DelayDecision | None:
    """The delay-scheduling decision over a ranking's candidates (``None``: no candidate fits).

    Parameters
    ----------
    devices
        Candidate devices.
    local, fits
        Per candidate: whether the input is local to it; whether it can take the batch (memory).
    wait_ms, transfer_ms, completion_ms, slack_ms
        Per candidate: expected queue wait (inf: saturated), expected transfer, expected
        completion (wait + load + transfer + latency), slack at the deadline.
    observed_wait
        ``(devices, q) -> (quantile q of their observed queue waits or None, how many)``.
    quantile
        Quantile of the observed waits that sets the delay limit.
    """
    usable = fits & np.isfinite(completion_ms)
    locals_ = np.flatnonzero(local & fits)
    remotes = np.flatnonzero(~local & usable)
    if not locals_.size and not remotes.size:
        return None
    best_remote = int(remotes[np.argmin(completion_ms[remotes])]) if remotes.size else -1
    if not locals_.size:
        r = best_remote
        return DelayDecision("remote_now", "", devices[r], 0.0, 0.0, math.nan, float(completion_ms[r]),
                             float(transfer_ms[r]), 0, "no candidate holds the input locally")
    # the local device that would finish first, were its wait known exactly
    finite_locals = locals_[np.isfinite(completion_ms[locals_])]
    pool = finite_locals if finite_locals.size else locals_
    best_local = int(pool[np.argmin(np.where(np.isfinite(completion_ms[pool]), completion_ms[pool], np.inf))])
    ell = best_local
    wait = float(wait_ms[ell])
    local_done = float(completion_ms[ell])
    if wait <= 0.0:
        return DelayDecision("local_now", devices[ell], devices[best_remote] if best_remote >= 0 else "", 0.0, 0.0,
                             local_done, float(completion_ms[best_remote]) if best_remote >= 0 else math.nan,
                             float(transfer_ms[best_remote]) if best_remote >= 0 else 0.0, 0,
                             f"{devices[ell]} holds the input and has no queue")
    limit, n = observed_wait([devices[ell]], quantile)
    if best_remote < 0:
        reason = f"no remote candidate fits: wait for {devices[ell]} (expected wait {wait:.1f} ms)"
        return DelayDecision("wait_local", devices[ell], "", wait, _finite(limit, wait), local_done, math.nan,
                             0.0, n, reason)
    r = best_remote
    remote_done = float(completion_ms[r])
    unloaded = local_done - wait if math.isfinite(local_done) else math.inf
    break_even = max(remote_done - unloaded, 0.0)
    delay_limit = break_even if limit is None else min(limit, break_even)
    origin = ("break-even" if limit is None or break_even <= limit
              else f"p{round(quantile * 100)} of {n} observed queue waits")
    common = dict(local_device=devices[ell], remote_device=devices[r], local_wait_ms=wait,
                  delay_limit_ms=delay_limit, local_completion_ms=local_done, remote_completion_ms=remote_done,
                  remote_transfer_ms=float(transfer_ms[r]), waits_observed=n)
    if slack_ms[ell] < 0 <= slack_ms[r]:
        return DelayDecision("remote_now", **common,
                             reason=f"waiting for {devices[ell]} misses the deadline; {devices[r]} meets it")
    if wait <= delay_limit:
        return DelayDecision("wait_local", **common, reason=(
            f"{devices[ell]} is busy: expected wait {wait:.1f} ms within T = {delay_limit:.1f} ms ({origin}); "
            f"waiting beats {devices[r]} now ({remote_done:.1f} ms with {float(transfer_ms[r]):.1f} ms transfer)"))
    return DelayDecision("remote_now", **common, reason=(
        f"{devices[ell]} is busy: expected wait {_ms(wait)} beyond T = {delay_limit:.1f} ms ({origin}); "
        f"{devices[r]} now finishes in {remote_done:.1f} ms ({float(transfer_ms[r]):.1f} ms transfer)"))


def _finite(value: float | None, default: float) -> float:
    return default if value is None or not math.isfinite(value) else value


def _ms(value: float) -> str:
    return "unbounded (saturated)" if not math.isfinite(value) else f"{value:.1f} ms"
