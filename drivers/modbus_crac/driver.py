"""``CracModbusDriver``: one cooling unit over Modbus TCP (or RTU through a TCP gateway), read-only.

``__init__`` validates and plans with no I/O; ``poll`` reads each batch once and never raises.
README.md ("What happens when") says what each Modbus answer does. The pitfall: "illegal address" on
*every* request of a poll is a unit not serving its map right now (restarting), not absent points,
so nothing is marked absent and every point is asked again at the next poll.
"""

from __future__ import annotations

import asyncio
import logging
import time

from pymodbus.exceptions import ConnectionException, ModbusException, ModbusIOException

from drivers.base import PollResult
from drivers.modbus_crac.config import CracConfig
from drivers.modbus_crac.decode import decode_value
from drivers.modbus_crac.estimate import estimate_inputs, estimate_power_w
from drivers.modbus_crac.plan import Batch, plan_batches, single_batches
from drivers.modbus_crac.profiles import ProfileError, load_profile, merged_points
from drivers.modbus_crac.readonly import FRAMERS, ReadOnlyModbus

log = logging.getLogger(__name__)

EXCEPTION_NAMES = {
    1: "illegal function", 2: "illegal data address", 3: "illegal data value", 4: "device failure",
    5: "acknowledge (busy)", 6: "device busy",
    10: "gateway path unavailable", 11: "gateway target did not respond",
}
ABSENT_CODES = frozenset({2, 3})  # the unit does not have this register
BUSY_CODES = frozenset({5, 6})  # try again later
UNREACHABLE_CODES = frozenset({10, 11})  # the gateway cannot reach the unit: the whole poll fails


class AbsentPoint:
    """Re-probe schedule of one point the unit rejects while it answers for others.

    Principle: the wait before asking again doubles with each refusal and never exceeds how long
    the point has already been refused (1, 2, 4 … polls), so a point that comes back is seen
    again within about as long as it was gone; the cap bounds what a truly absent point costs
    for ever: one extra request every ``cap`` polls.
    """

    __slots__ = ("polls_left", "wait_polls")

    def __init__(self) -> None:
        self.wait_polls = 1
        self.polls_left = 1

    def refused_again(self, cap: int) -> None:
        self.wait_polls = min(cap, self.wait_polls * 2)
        self.polls_left = self.wait_polls


class UnitUnreachable(Exception):
    """The unit (or its gateway) cannot be talked to this poll."""


def exception_text(code: int | None) -> str:
    if code is None:
        return "error response without an exception code"
    return f"exception {code} ({EXCEPTION_NAMES.get(code, 'unknown')})"


class CracModbusDriver:
    """A configured cooling unit; ``poll`` does all I/O and never raises."""

    def __init__(
        self, cfg: CracConfig, *, reprobe_after_polls: int = 30, busy_retry_s: float = 0.25
    ) -> None:
        self.cfg = cfg
        self.device = f"crac.{cfg.id}"
        self.interval_s = cfg.interval_s
        self.where = f"crac '{cfg.id}' ({cfg.host}:{cfg.port})"
        if cfg.framer not in FRAMERS:
            raise ProfileError(
                f"crac '{cfg.id}': framer must be one of {sorted(FRAMERS)}, got {cfg.framer!r}"
            )
        self.profile = load_profile(cfg.profile)
        self.points = merged_points(self.profile, cfg.registers, f"crac '{cfg.id}'")
        if not self.points:
            raise ProfileError(
                f"crac '{cfg.id}': profile {cfg.profile!r} has no points; list them in [[crac.registers]]"
            )
        self.batches: list[Batch] = plan_batches(
            self.points, self.profile.max_registers, self.profile.bridge_gap
        )
        self.absent: dict[str, AbsentPoint] = {}  # signal → its re-probe schedule
        self.reprobe_after_polls = max(1, reprobe_after_polls)
        self.busy_retry_s = busy_retry_s
        self.estimate_inputs = estimate_inputs(cfg, cfg.cooling_kind or self.profile.cooling_kind,
                                               self.profile.cop)
        # Our own messages name the unit; pymodbus's "Failed to connect" lines only repeat them.
        pymodbus_log = logging.getLogger("pymodbus")
        if pymodbus_log.level == logging.NOTSET:
            pymodbus_log.setLevel(logging.CRITICAL)
        self._modbus: ReadOnlyModbus | None = None

    @property
    def deadline_s(self) -> float:
        """Whole-poll bound: one full timeout cycle per batch, at least 80 % of the interval."""
        per_request = self.cfg.timeout_s * (self.cfg.retries + 1)
        return max(0.8 * self.interval_s, per_request * len(self.batches) + self.cfg.timeout_s)

    async def poll(self) -> PollResult:
        ts = time.time()
        started = time.perf_counter()
        values: dict[str, float] = {}
        problems: list[str] = []
        failure: str | None = None
        try:
            await asyncio.wait_for(self._read_all(values, problems), timeout=self.deadline_s)
        except TimeoutError:
            failure = f"no complete answer within the poll deadline of {self.deadline_s:g} s"
        except UnitUnreachable as exc:
            failure = str(exc)
        except ModbusIOException:
            tries = self.cfg.retries + 1
            plural = "try" if tries == 1 else "tries"
            failure = f"no answer within {self.cfg.timeout_s:g} s ({tries} {plural})"
        except ConnectionException as exc:
            failure = f"connection lost: {exc}"
        except (ModbusException, OSError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a poll never raises: the loop must go on for the other devices
            log.exception("%s: unexpected error", self.where)
            failure = f"unexpected {type(exc).__name__}: {exc}"
        if failure is not None:
            self._drop_connection()
        signals, estimated = self._signals(values)
        if failure is None and not values:
            failure = "no values: every point absent or unavailable"
        messages = ([failure] if failure else []) + problems
        return PollResult(
            device=self.device,
            ts=ts,
            signals=signals,
            ok=failure is None,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
            profile=self.profile.name,
            error=f"{self.where}: " + "; ".join(messages) if messages else None,
            estimated=estimated,
            unverified=frozenset(f"{self.device}.{p.signal}" for p in self.points
                                 if not p.verified and f"{self.device}.{p.signal}" in signals),
        )

    def _signals(self, values: dict[str, float]) -> tuple[dict[str, float], frozenset[str]]:
        estimated: set[str] = set()
        if "power_w" not in values:
            power_w = estimate_power_w(values, self.estimate_inputs)
            if power_w is not None:
                values = {**values, "power_w": power_w}
                estimated.add(f"{self.device}.power_w")
        return {f"{self.device}.{name}": value for name, value in values.items()}, frozenset(estimated)

    async def close(self) -> None:
        self._drop_connection()

    def _drop_connection(self) -> None:
        if self._modbus is not None:
            self._modbus.close()
            self._modbus = None

    async def _connected(self) -> ReadOnlyModbus:
        if self._modbus is None:
            self._modbus = ReadOnlyModbus(
                self.cfg.host,
                self.cfg.port,
                framer=self.cfg.framer,
                timeout_s=self.cfg.timeout_s,
                retries=self.cfg.retries,
            )
        if not self._modbus.connected:
            try:
                ok = await asyncio.wait_for(self._modbus.connect(), timeout=self.cfg.timeout_s + 0.5)
            except TimeoutError:
                ok = False
            if not ok:
                raise UnitUnreachable(
                    f"cannot connect (refused, or no answer within {self.cfg.timeout_s:g} s)"
                )
        return self._modbus

    def _due(self) -> list[Batch]:
        """This poll's batches: absent points wait out their re-probe countdown."""
        due = []
        for batch in self.batches:
            absent = self.absent.get(batch.points[0].signal) if len(batch.points) == 1 else None
            if absent is not None:
                absent.polls_left -= 1
                if absent.polls_left > 0:
                    continue
            due.append(batch)
        return due

    async def _read_all(self, values: dict[str, float], problems: list[str]) -> None:
        modbus = await self._connected()
        refused: list[tuple[Batch, int]] = []  # illegal-address answers, judged once the poll is read
        answered = 0
        for batch in self._due():
            code = await self._read_batch(modbus, batch, values, problems)
            if code is None:
                answered += 1
            elif code in ABSENT_CODES:
                refused.append((batch, code))
        if refused and not answered:
            code = refused[0][1]
            problems.append(
                f"every request refused with {exception_text(code)}: the unit is not serving its "
                "register map (restarting?); asking for every point again next poll"
            )
            return
        for batch, code in refused:
            await self._isolate_absent(modbus, batch, code, values, problems)

    async def _isolate_absent(
        self, modbus: ReadOnlyModbus, batch: Batch, code: int, values: dict[str, float], problems: list[str]
    ) -> None:
        """While the unit answers other requests, an illegal-address batch holds an absent point."""
        if len(batch.points) == 1:
            self._mark_absent(batch.points[0].signal, code)
            return
        singles = single_batches(batch)
        index = self.batches.index(batch)
        self.batches[index : index + 1] = singles
        for single in singles:
            single_code = await self._read_batch(modbus, single, values, problems)
            if single_code in ABSENT_CODES:
                self._mark_absent(single.points[0].signal, single_code)

    def _mark_absent(self, signal: str, code: int) -> None:
        absent = self.absent.get(signal)
        if absent is None:
            self.absent[signal] = absent = AbsentPoint()
            log.info("%s: %s absent (%s); probing again after 1, 2, 4 … up to %d polls",
                     self.where, signal, exception_text(code), self.reprobe_after_polls)
        else:
            absent.refused_again(self.reprobe_after_polls)

    async def _read_batch(
        self, modbus: ReadOnlyModbus, batch: Batch, values: dict[str, float], problems: list[str]
    ) -> int | None:
        """Read one batch into ``values``; returns None when it answered, else the exception code
        of an illegal-address refusal (for the caller to judge) or -1 for a problem already noted."""
        reply = await modbus.read(batch.function_code, batch.start, batch.count, self.cfg.unit_id)
        if reply.exception_code in BUSY_CODES:
            await asyncio.sleep(self.busy_retry_s)
            reply = await modbus.read(batch.function_code, batch.start, batch.count, self.cfg.unit_id)
        what = f"FC{batch.function_code} {batch.start}+{batch.count}"
        if reply.values is not None:
            for point in batch.points:
                if self.absent.pop(point.signal, None) is not None:
                    log.info("%s: %s answers again", self.where, point.signal)
                value = decode_value(point, batch.words_of(point, reply.values))
                if value is not None:
                    values[point.signal] = value
            return None
        code = reply.exception_code
        if code in ABSENT_CODES:
            return code
        if code in UNREACHABLE_CODES:
            raise UnitUnreachable(f"{what}: {exception_text(code)}")
        signals = ", ".join(point.signal for point in batch.points)
        problems.append(f"{what} ({signals}): {exception_text(code)}; missing this poll")
        return -1
