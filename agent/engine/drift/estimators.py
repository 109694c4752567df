"""Streaming statistics the drift detector is built from, each a small class with fixed state.

River style (../shared/STYLE.md): ``update(...)`` returns ``self``; values are read-only properties,
``None`` before data; mutable state is created in ``_reset()`` and never grows with uptime;
``Cls.from_state(x.state())`` rebuilds an equal estimator (constructor arguments included).
Every EW mean warm-starts with ``alpha = max(1/(n+1), ln 2/halflife)`` (``ew_alpha``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, TypeVar

import numpy as np

from agent.payload import number

MAD_TO_SIGMA = 1.2533  # √(π/2): E|x − μ| · √(π/2) = σ for Gaussian noise
LN2 = math.log(2.0)

E = TypeVar("E", bound="Estimator")


def ew_alpha(n: float, halflife: float) -> float:
    """Weight of the next sample: the running mean's 1/(n+1) until the half-life takes over."""
    return max(1.0 / (n + 1.0), LN2 / halflife)


def finite_or_none(value: float) -> float | None:
    """``value`` as a float, or None when it is NaN or infinite (JSON-safe state)."""
    return float(value) if math.isfinite(value) else None


def number_or_nan(value: object) -> float:
    """A number read back from JSON state, NaN when absent or not a number (the inverse of
    ``finite_or_none``)."""
    read = number(value)  # (a JSON integer too large for a float is not one either)
    return math.nan if read is None else read


def fields_state(obj: object, names: tuple[str, ...], prefix: str = "") -> dict[str, Any]:
    """JSON-safe snapshot of ``obj``'s attributes ``prefix + name`` (NaN as None, arrays as lists)."""
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(obj, prefix + name)
        if isinstance(value, np.ndarray):
            out[name] = [finite_or_none(float(v)) for v in value.ravel()]
        elif isinstance(value, (bool, str)):
            out[name] = value
        else:
            out[name] = finite_or_none(float(value))
    return out


def load_fields(
    obj: object, data: dict[str, Any], names: tuple[str, ...], where: str, prefix: str = ""
) -> None:
    """Load ``fields_state`` output into ``obj``; a wrong type or shape raises ``ValueError`` naming
    ``where`` and the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: state must be a mapping")
    for name in names:
        current, value = getattr(obj, prefix + name), data.get(name)
        if isinstance(current, np.ndarray):
            if not isinstance(value, list) or len(value) != current.size:
                raise ValueError(f"{where}: {name} must be a list of {current.size} numbers")
            if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in value):
                raise ValueError(f"{where}: {name} must hold numbers")
            flat = np.array([math.nan if v is None else float(v) for v in value])
            current[...] = flat.reshape(current.shape)
        elif isinstance(current, (bool, str)):
            if type(value) is not type(current):
                raise ValueError(f"{where}: {name} must be a {type(current).__name__}")
            setattr(obj, prefix + name, value)
        elif value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise ValueError(f"{where}: {name} must be a number, got {value!r}")
        elif isinstance(current, int):
            if value is None or value != int(value):
                raise ValueError(f"{where}: {name} must be a whole number")
            setattr(obj, prefix + name, int(value))
        else:
            setattr(obj, prefix + name, math.nan if value is None else float(value))


class Estimator:
    """Base: ``PARAMS`` (constructor arguments) and ``SCALARS`` / ``ARRAYS`` (state) are persisted."""

    PARAMS: ClassVar[tuple[str, ...]] = ()
    SCALARS: ClassVar[tuple[str, ...]] = ()
    ARRAYS: ClassVar[tuple[str, ...]] = ()

    def _reset(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """JSON-safe snapshot (NaN as None), fixed size for given parameters."""
        params = {name: getattr(self, name) for name in self.PARAMS}
        return {"params": params, **fields_state(self, self.SCALARS + self.ARRAYS, prefix="_")}

    @classmethod
    def from_state(cls: type[E], data: dict[str, Any]) -> E:
        """Rebuild from ``state()``; a wrong shape raises ``ValueError`` naming the field."""
        params = data.get("params") if isinstance(data, dict) else None
        if not isinstance(params, dict):
            raise ValueError(f"{cls.__name__}: state has no params")
        est = cls(**params)
        est.load(data)
        return est

    def load(self: E, data: dict[str, Any]) -> E:
        """Load the state fields of ``data`` (params are this instance's own)."""
        if not isinstance(data, dict):
            raise ValueError(f"{type(self).__name__}: state must be a mapping")
        self._reset()
        load_fields(self, data, self.SCALARS + self.ARRAYS, type(self).__name__, prefix="_")
        return self


class ReferenceLevel(Estimator):
    """A slow reference ("before") and a fast level ("now") of one signal; the reference stops
    learning while ``hold`` is passed, so it remembers what the signal was before a change.

    >>> r = ReferenceLevel(fast_halflife=2.0, ref_halflife=100.0)
    >>> for x in (1.0, 1.0, 1.0):
    ...     _ = r.update(x)
    >>> for x in (3.0,) * 10:
    ...     _ = r.update(x, hold=True)
    >>> r.ref, round(r.fast, 2), round(r.moved, 2)
    (1.0, 2.97, 1.97)
    """

    PARAMS = ("fast_halflife", "ref_halflife")
    SCALARS = ("ref", "fast", "n")

    def __init__(self, fast_halflife: float, ref_halflife: float) -> None:
        self.fast_halflife = float(fast_halflife)
        self.ref_halflife = float(ref_halflife)
        self._reset()

    def _reset(self) -> None:
        self._ref = math.nan
        self._fast = math.nan
        self._n = 0.0

    def update(self, x: float, hold: bool = False) -> ReferenceLevel:
        if not math.isfinite(x):
            return self
        a_fast = ew_alpha(self._n, self.fast_halflife)
        self._fast = x if not math.isfinite(self._fast) else self._fast + a_fast * (x - self._fast)
        if not hold or not math.isfinite(self._ref):
            a_ref = ew_alpha(self._n, self.ref_halflife)
            self._ref = x if not math.isfinite(self._ref) else self._ref + a_ref * (x - self._ref)
            self._n += 1.0
        return self

    @property
    def ref(self) -> float | None:
        return finite_or_none(self._ref)

    @property
    def fast(self) -> float | None:
        return finite_or_none(self._fast)

    @property
    def moved(self) -> float | None:
        """fast − ref (None until both are known)."""
        return finite_or_none(self._fast - self._ref)

    @property
    def n(self) -> float:
        return self._n

    def adopt(self) -> None:
        """The current level becomes the reference (a new normal was accepted)."""
        if math.isfinite(self._fast):
            self._ref = self._fast

    def set_levels(self, ref: float, fast: float) -> None:
        """Rebase both (a restart of the same job: its own typical value is the reference)."""
        self._ref, self._fast = float(ref), float(fast)

    def forget_fast(self) -> None:
        """The fast level restarts from the next sample (a new job's own values)."""
        self._fast = math.nan


class StageLocation(Estimator):
    """Robust per-stage level and noise of a residual (Huber-clipped EW mean, EW mean |dev|).

    Once ``warm`` samples are in, a step is clipped to ``HUBER`` × the noise, so one glitch moves
    the level little. ``predicted``: the level plus a caller's trend; ``learn_scale`` False keeps
    the noise from learning the shift being watched.

    >>> s = StageLocation(n_slots=2, halflife=100.0, scale_halflife=100.0, min_scale=0.1, warm=3)
    >>> s.level(0) is None
    True
    >>> for x in (1.0, 1.2, 0.8, 1.0, 9.0):
    ...     _ = s.update(x, 0)
    >>> round(s.level(0), 3), round(s.scale(0), 3), s.ready(0), s.ready(1)
    (1.132, 0.395, True, False)
    """

    PARAMS = ("n_slots", "halflife", "scale_halflife", "min_scale", "warm")
    ARRAYS = ("loc", "n", "scale")
    HUBER = 3.0  # Huber's clip: 3 σ keeps Gaussian noise nearly unclipped (0.3 % of samples)
    SCALE_CLIP = 4.0  # a deviation beyond 4 σ counts as 4 σ in the noise estimate

    def __init__(self, n_slots: int, halflife: float, scale_halflife: float, min_scale: float,
                 warm: int) -> None:
        self.n_slots = int(n_slots)
        self.halflife = float(halflife)
        self.scale_halflife = float(scale_halflife)
        self.min_scale = float(min_scale)
        self.warm = int(warm)
        self._reset()

    def _reset(self) -> None:
        self._loc = np.zeros(self.n_slots)
        self._n = np.zeros(self.n_slots)
        self._scale = np.full(self.n_slots, math.nan)

    def update(self, x: float, slot: int, predicted: float | None = None, halflife: float | None = None,
               learn_scale: bool = True) -> StageLocation:
        self.step(x, slot, predicted, halflife, learn_scale)
        return self

    def step(self, x: float, slot: int, predicted: float | None = None, halflife: float | None = None,
             learn_scale: bool = True) -> float:
        """``update`` that returns the (clipped) step the level took, for a caller's trend."""
        n = float(self._n[slot])
        loc = float(self._loc[slot]) if predicted is None else predicted
        scale = float(self._scale[slot])
        alpha = ew_alpha(n, self.halflife if halflife is None else halflife)
        err = x - loc
        if math.isfinite(scale) and n >= self.warm:
            limit = self.HUBER * max(scale, self.min_scale)
            err = min(max(err, -limit), limit)
        self._loc[slot] = loc + alpha * err
        if n > 0 and learn_scale:
            abs_err = abs(x - loc)
            if not math.isfinite(scale):
                self._scale[slot] = abs_err * MAD_TO_SIGMA
            else:
                a_s = ew_alpha(n, self.scale_halflife)
                clipped = min(abs_err, self.SCALE_CLIP * max(scale, self.min_scale))
                self._scale[slot] = scale + a_s * (clipped * MAD_TO_SIGMA - scale)
        self._n[slot] = n + 1.0
        return alpha * err

    def level(self, slot: int) -> float | None:
        return float(self._loc[slot]) if self._n[slot] > 0 else None

    def raw_level(self, slot: int) -> float:
        """The stored level (0 before data): the base a caller's trend extrapolates from."""
        return float(self._loc[slot])

    def scale(self, slot: int) -> float | None:
        return finite_or_none(float(self._scale[slot]))

    def count(self, slot: int) -> float:
        return float(self._n[slot])

    def ready(self, slot: int) -> bool:
        """The slot has seen ``warm`` samples and knows its noise: its residuals can be judged."""
        return bool(self._n[slot] >= self.warm and math.isfinite(self._scale[slot]))

    def set_level(self, slot: int, level: float) -> None:
        """Move a slot's level without learning (a caller extrapolating a trend while held)."""
        self._loc[slot] = level

    def pin(self, slot: int, level: float, weight: float, scale: float | None = None) -> None:
        """Pin a slot to a known level with ``weight`` samples' worth of confidence."""
        self._loc[slot], self._n[slot] = level, weight
        if scale is not None and math.isfinite(scale):
            self._scale[slot] = scale

    def forget(self, slot: int | None = None) -> None:
        """Re-warm one slot (or all) from its next samples; the noise is kept as a prior."""
        if slot is None:
            self._n[:] = 0.0
        else:
            self._n[slot] = 0.0

    def scales(self) -> np.ndarray:
        return self._scale.copy()


class CorrelatedScale(Estimator):
    """Robust scale of a stream of z-scores and their lag-1 autocorrelation.

    Why both: a CUSUM on autocorrelated increments alarms more often than its threshold says; a sum
    of AR(1) terms has its variance inflated by (1 + ρ)/(1 − ρ) (``vif``), ρ capped at ``max_rho`` so
    one persistent stretch cannot silence the detector.

    >>> c = CorrelatedScale(halflife=50.0, min_scale=0.1, z_clip=6.0)
    >>> c.value is None
    True
    >>> for z in (1.0, -1.0) * 20:
    ...     _ = c.update(z)
    >>> round(c.value, 3), round(c.rho, 3), round(c.vif, 3)
    (1.253, -0.975, 1.0)
    """

    PARAMS = ("halflife", "min_scale", "z_clip", "max_rho")
    SCALARS = ("scale", "n", "acf_num", "acf_den", "z_prev")
    SCALE_CLIP = 4.0
    WARM = 8  # samples before clipping: the first scale is one |z| and may be tiny

    def __init__(self, halflife: float, min_scale: float, z_clip: float, max_rho: float = 0.6) -> None:
        self.halflife = float(halflife)
        self.min_scale = float(min_scale)
        self.z_clip = float(z_clip)
        self.max_rho = float(max_rho)
        self._reset()

    def _reset(self) -> None:
        self._scale = math.nan
        self._n = 0.0
        self._acf_num = 0.0
        self._acf_den = 0.0
        self._z_prev = 0.0

    def update(self, z: float) -> CorrelatedScale:
        alpha = ew_alpha(self._n, self.halflife)
        if math.isfinite(self._scale) and self._n >= self.WARM:
            target = min(abs(z), self.SCALE_CLIP * max(self._scale, self.min_scale)) * MAD_TO_SIGMA
        else:
            target = abs(z) * MAD_TO_SIGMA
        if math.isfinite(self._scale):
            target = self._scale + alpha * (target - self._scale)
        self._scale = target
        self._n += 1.0
        zs = z / max(self._scale, self.min_scale)
        zs = min(max(zs, -self.z_clip), self.z_clip)
        self._acf_num += alpha * (zs * self._z_prev - self._acf_num)
        self._acf_den += alpha * (zs * zs - self._acf_den)
        self._z_prev = zs
        return self

    @property
    def value(self) -> float | None:
        return finite_or_none(self._scale)

    @property
    def floored(self) -> float:
        """The scale to divide by: at least ``min_scale`` (and that before data)."""
        return max(self._scale, self.min_scale) if math.isfinite(self._scale) else self.min_scale

    @property
    def rho(self) -> float:
        return self._acf_num / self._acf_den if self._acf_den > 0 else 0.0

    @property
    def vif(self) -> float:
        rho = min(max(self.rho, 0.0), self.max_rho)
        return (1.0 + rho) / (1.0 - rho)

    @property
    def n(self) -> float:
        return self._n


class TwoSidedCusum(Estimator):
    """Page's two-sided CUSUM on standardised increments; each side keeps when it last left zero
    (``since``) and its raw deviations and z-scores since, to size the shift in the residual's unit.

    >>> c = TwoSidedCusum(k=0.5)
    >>> for i, z in enumerate([0.0] * 5 + [2.0] * 4):
    ...     _ = c.update(z, dev=10.0 * z, ts=float(i))
    >>> c.up, c.down, c.since, c.deviation
    (6.0, 0.0, 5.0, 20.0)
    """

    PARAMS = ("k",)
    SCALARS = ("up", "dn", "since_up", "since_dn", "sum_up", "zsum_up", "n_up", "sum_dn", "zsum_dn", "n_dn")

    def __init__(self, k: float) -> None:
        self.k = float(k)
        self._reset()

    def _reset(self) -> None:
        self._up = self._dn = 0.0
        self._since_up = self._since_dn = math.nan
        self._sum_up = self._zsum_up = self._n_up = 0.0
        self._sum_dn = self._zsum_dn = self._n_dn = 0.0

    def update(self, z: float, dev: float, ts: float) -> TwoSidedCusum:
        up = max(0.0, self._up + z - self.k)
        dn = max(0.0, self._dn - z - self.k)
        if up > 0.0:
            if self._up == 0.0:
                self._since_up, self._sum_up, self._zsum_up, self._n_up = ts, 0.0, 0.0, 0.0
            self._sum_up += dev
            self._zsum_up += z
            self._n_up += 1.0
        if dn > 0.0:
            if self._dn == 0.0:
                self._since_dn, self._sum_dn, self._zsum_dn, self._n_dn = ts, 0.0, 0.0, 0.0
            self._sum_dn -= dev
            self._zsum_dn -= z
            self._n_dn += 1.0
        self._up, self._dn = up, dn
        return self

    def clear(self) -> None:
        """Both sides back to zero (their evidence sums restart when they next leave it)."""
        self._up = self._dn = 0.0

    @property
    def up(self) -> float:
        return self._up

    @property
    def down(self) -> float:
        return self._dn

    @property
    def value(self) -> float:
        """The larger side."""
        return max(self._up, self._dn)

    @property
    def since(self) -> float:
        """When the larger side last left zero (NaN before)."""
        return self._since_up if self._up >= self._dn else self._since_dn

    @property
    def deviation(self) -> float:
        """Mean deviation since the larger side left zero (signed; 0 when both are zero)."""
        return self._mean_since(self._sum_up, self._sum_dn)

    @property
    def z(self) -> float:
        """Mean z-score since the larger side left zero (signed; 0 when both are zero)."""
        return self._mean_since(self._zsum_up, self._zsum_dn)

    def _mean_since(self, sum_up: float, sum_dn: float) -> float:
        if self._up == 0.0 and self._dn == 0.0:
            return 0.0
        if self._up >= self._dn:
            return sum_up / self._n_up if self._n_up else 0.0
        return -(sum_dn / self._n_dn) if self._n_dn else 0.0


class DelayedReference(Estimator):
    """The value a level had ``delay`` updates ago: a fast-following level (weather on a cooling
    unit) would absorb a step unseen; judged against its value an hour ago, the step stays visible.

    >>> d = DelayedReference(delay=3)
    >>> [d.update(float(x)).value for x in range(5)]
    [None, None, None, 0.0, 1.0]
    """

    PARAMS = ("delay",)
    SCALARS = ("i",)
    ARRAYS = ("ring",)

    def __init__(self, delay: int) -> None:
        self.delay = max(1, int(delay))
        self._reset()

    def _reset(self) -> None:
        self._ring = np.full(self.delay, math.nan)
        self._i = 0.0
        self._past = math.nan

    def update(self, level: float) -> DelayedReference:
        i = int(self._i) % self.delay
        self._past = float(self._ring[i])
        self._ring[i] = level
        self._i = float((i + 1) % self.delay)
        return self

    @property
    def value(self) -> float | None:
        """The level read out by the last ``update`` (None while the ring fills)."""
        return finite_or_none(self._past)

    def forget(self, level: float = math.nan) -> None:
        """Fill the ring with ``level`` (NaN: no past known)."""
        self._ring[:] = level


class StageMix(Estimator):
    """Share of time per stage slot, long-run and recent (EW one-hot means, one warm start).

    >>> m = StageMix(n_slots=2, slow_halflife=100.0, fast_halflife=5.0, warm=3)
    >>> for s in [0] * 10 + [1] * 10:
    ...     _ = m.update(s)
    >>> round(m.distance, 2)
    0.28
    """

    PARAMS = ("n_slots", "slow_halflife", "fast_halflife", "warm")
    SCALARS = ("n",)
    ARRAYS = ("slow", "fast")

    def __init__(self, n_slots: int, slow_halflife: float, fast_halflife: float, warm: int) -> None:
        self.n_slots = int(n_slots)
        self.slow_halflife = float(slow_halflife)
        self.fast_halflife = float(fast_halflife)
        self.warm = int(warm)
        self._reset()

    def _reset(self) -> None:
        self._slow = np.full(self.n_slots, 1.0 / self.n_slots)
        self._fast = np.full(self.n_slots, 1.0 / self.n_slots)
        self._n = 0.0

    def update(self, slot: int) -> StageMix:
        onehot = np.zeros(self.n_slots)
        onehot[slot] = 1.0
        self._slow += ew_alpha(self._n, self.slow_halflife) * (onehot - self._slow)
        self._fast += ew_alpha(self._n, self.fast_halflife) * (onehot - self._fast)
        self._n += 1.0
        return self

    @property
    def distance(self) -> float:
        """Half the L1 distance between the recent and the long-run mix (0 … 1); 0 while warming."""
        return 0.5 * float(np.abs(self._fast - self._slow).sum()) if self._n > self.warm else 0.0

    @property
    def long_run(self) -> np.ndarray:
        return self._slow.copy()

    def adopt(self) -> None:
        """The recent mix becomes the long-run one (a new normal)."""
        self._slow[:] = self._fast


class TypicalRate(Estimator):
    """Per stage slot, the work rate most bins run at: the median of the first ``first`` bins, then
    an EW mean of in-``band`` bins only (stall-shortened bins must not drag it down); when a share
    ``reacquire`` of recent bins runs outside the band (a new job), it jumps to ``fallback``.

    >>> t = TypicalRate(n_slots=1, halflife=30.0, band=0.03, reacquire=0.6, first=3)
    >>> for r in (100.0, 60.0, 101.0, 100.0, 50.0, 100.0):
    ...     _ = t.update(r, 0)
    >>> round(t.value(0), 2), t.settled(0)
    (100.0, True)
    """

    PARAMS = ("n_slots", "halflife", "band", "reacquire", "first")
    ARRAYS = ("typical", "out", "firsts", "first_n")

    def __init__(self, n_slots: int, halflife: float, band: float, reacquire: float, first: int) -> None:
        self.n_slots = int(n_slots)
        self.halflife = float(halflife)
        self.band = float(band)
        self.reacquire = float(reacquire)
        self.first = int(first)
        self._reset()

    def _reset(self) -> None:
        self._typical = np.full(self.n_slots, math.nan)
        self._out = np.zeros(self.n_slots)
        self._firsts = np.full((self.n_slots, self.first), math.nan)
        self._first_n = np.zeros(self.n_slots)

    def update(self, rate: float, slot: int, fallback: float | None = None) -> TypicalRate:
        if not math.isfinite(rate):
            return self
        typical = float(self._typical[slot])
        alpha = LN2 / self.halflife
        i = int(self._first_n[slot])
        if i < self.first:
            self._firsts[slot, i] = rate
            self._first_n[slot] = i + 1
            self._typical[slot] = float(np.median(self._firsts[slot, : i + 1]))
            return self
        in_band = abs(rate - typical) <= self.band * max(abs(typical), 1e-9)
        self._out[slot] += alpha * ((0.0 if in_band else 1.0) - self._out[slot])
        if in_band:
            self._typical[slot] = typical + alpha * (rate - typical)
        elif self._out[slot] >= self.reacquire:
            self._typical[slot] = fallback if fallback is not None else rate
            self._out[slot] = 0.0
        return self

    def value(self, slot: int) -> float | None:
        return finite_or_none(float(self._typical[slot]))

    def settled(self, slot: int) -> bool:
        """Past the slot's first bins, so the rate can gate bins."""
        return bool(self._first_n[slot] >= self.first)

    def restart(self) -> None:
        """Every slot re-acquires from its next bins (a new job)."""
        self._reset()

    def any_positive(self) -> bool:
        return bool(np.nansum(self._typical) > 0)


class LevelInNoise(Estimator):
    """A residual's recent level in units of its usual size (``z``): how far a model is behind.

    The usual size is the EW mean |level| (as σ) over the slow ``noise_halflife``, learned only while
    the level is within ``z_clip`` σ: a step being measured never inflates it, while the model's
    everyday error (autocorrelated over minutes, far above one bin's jitter) is what it holds.

    >>> e = LevelInNoise(level_halflife=3.0, noise_halflife=100.0, min_scale=0.1, z_clip=6.0)
    >>> for i in range(200):
    ...     _ = e.update(0.5 if i % 10 < 5 else -0.5)
    >>> round(e.scale, 2), abs(e.z) < 2.0
    (0.21, True)
    >>> for _ in range(10):
    ...     _ = e.update(5.0)
    >>> e.z > 4.0
    True
    """

    PARAMS = ("level_halflife", "noise_halflife", "min_scale", "z_clip")
    SCALARS = ("level", "mad", "n")

    def __init__(self, level_halflife: float, noise_halflife: float, min_scale: float, z_clip: float) -> None:
        self.level_halflife = float(level_halflife)
        self.noise_halflife = float(noise_halflife)
        self.min_scale = float(min_scale)
        self.z_clip = float(z_clip)
        self._reset()

    def _reset(self) -> None:
        self._level = math.nan
        self._mad = 0.0
        self._n = 0.0

    def update(self, x: float, learn_scale: bool = True) -> LevelInNoise:
        """``learn_scale`` False: the level moves, its usual size does not (a change is under way)."""
        if not math.isfinite(x):
            return self
        level = self._level
        self._level = level + LN2 / self.level_halflife * (x - level) if math.isfinite(level) else x
        size = abs(self._level)
        scale = self.scale
        if learn_scale and (scale is None or size <= self.z_clip * scale):
            self._mad += ew_alpha(self._n, self.noise_halflife) * (size - self._mad)
            self._n += 1.0
        return self

    @property
    def level(self) -> float | None:
        return finite_or_none(self._level)

    @property
    def scale(self) -> float | None:
        """The level's usual σ, floored at ``min_scale`` (None before data)."""
        if self._n < 1:
            return None
        return max(self._mad * MAD_TO_SIGMA, self.min_scale)

    @property
    def z(self) -> float | None:
        """The recent level in σ (signed; None before data)."""
        scale = self.scale
        if scale is None or not math.isfinite(self._level):
            return None
        return self._level / scale


class OperatingBands(Estimator):
    """A model's mean residual per band of its operating point (``x``, a log load), and how much of
    the model's learning each band has had.

    Why: a cooling unit's part-load curve bends where its fans reach their floor and its compressor
    stages down, so a smooth fit of log power on log load, learned where the unit usually runs, is off
    by 5–12 % at a load it seldom reaches (an idle gap between jobs). The band's own mean corrects
    the fit there, and a band with less than ``warm`` samples' weight has not shown the model its
    curve: its residual is no evidence (``level`` is None) unless the band lies between two that
    have (then their levels are interpolated). Weights decay with ``halflife`` (in updates), the
    fit's own memory.

    >>> b = OperatingBands(n_bands=8, width=0.5, halflife=100.0, warm=3)
    >>> for _ in range(5):
    ...     _ = b.update(0.1, 0.02)   # the usual load, the fit right on average
    >>> _ = b.update(-1.2, 0.3)       # a low load, once
    >>> round(b.level(0.2), 3), b.level(-1.2), b.level(3.0)
    (0.02, None, None)
    >>> for _ in range(3):
    ...     _ = b.update(-1.2, 0.3)
    >>> round(b.level(-1.2), 3), round(b.level(-0.7), 3)  # learned; between two learned bands
    (0.3, 0.207)
    """

    PARAMS = ("n_bands", "width", "halflife", "warm")
    ARRAYS = ("mean", "weight")

    def __init__(self, n_bands: int, width: float, halflife: float, warm: float) -> None:
        self.n_bands = int(n_bands)
        self.width = float(width)
        self.halflife = float(halflife)
        self.warm = float(warm)
        self._reset()

    def _reset(self) -> None:
        self._mean = np.zeros(self.n_bands)
        self._weight = np.zeros(self.n_bands)

    def band(self, x: float) -> int | None:
        """The band of operating point ``x`` (None outside the covered range or not finite)."""
        if not math.isfinite(x):
            return None
        i = math.floor(x / self.width) + self.n_bands // 2
        return i if 0 <= i < self.n_bands else None

    def update(self, x: float, residual: float) -> OperatingBands:
        """Learn one residual at operating point ``x``; every band's weight decays by one update."""
        i = self.band(x)
        if i is None or not math.isfinite(residual):
            return self
        self._weight *= 0.5 ** (1.0 / self.halflife)
        self._weight[i] += 1.0
        self._mean[i] += (residual - self._mean[i]) / self._weight[i]
        return self

    def level(self, x: float) -> float | None:
        """The band's mean residual once it has ``warm`` samples' weight; between two such bands,
        interpolated (a fit is trusted inside the range of its data); beyond them, None."""
        i = self.band(x)
        if i is None:
            return None
        if self._weight[i] >= self.warm:
            return float(self._mean[i])
        known = np.flatnonzero(self._weight >= self.warm)
        below, above = known[known < i], known[known > i]
        if not below.size or not above.size:
            return None
        lo, hi = int(below[-1]), int(above[0])
        share = (i - lo) / (hi - lo)
        return float(self._mean[lo] + share * (self._mean[hi] - self._mean[lo]))


ESTIMATORS: tuple[type[Estimator], ...] = (
    ReferenceLevel, StageLocation, CorrelatedScale, TwoSidedCusum, DelayedReference, StageMix,
    TypicalRate, LevelInNoise, OperatingBands,
)
