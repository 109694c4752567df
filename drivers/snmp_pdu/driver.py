"""The SNMP PDU driver: one configured PDU (or daisy-chain) polled into canonical ``pdu.<id>.*`` signals.

First poll: choose the profile, walk its tables once and plan the exact OIDs; every later poll is
one batched GET of them (README.md, "How a poll works"). A poll never raises, and its deadline
bounds it, so one dead PDU never holds up the others.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from pathlib import Path
from typing import Any

from pysnmp.hlapi.v3arch.asyncio import CommunityData, SnmpEngine, UsmUserData

from agent.config.secrets import read_secret
from agent.trace.model import J_PER_KWH
from drivers.base import PollResult
from drivers.counters import CounterDelta, PowerIntegral

from .client import AUTH_PROTOCOLS, PRIV_PROTOCOLS, Oid, SnmpError, SnmpSession, protocol, v3_auth
from .config import PDU_MAX_POWER_W
from .plan import Decoded, PollPlan, Row, build_plan, decode, keep_by_index, keep_row, prune
from .profile import (
    PROFILE_DIR,
    Profile,
    ProfileError,
    builtin_profiles,
    generic_profile,
    get_profile,
    match_sys_object_id,
    oid_text,
)

SYS_OBJECT_ID = (1, 3, 6, 1, 2, 1, 1, 2, 0)
REDISCOVER_S = 3600.0  # walk the tables again this often, to see a unit that joined a daisy-chain
FALLBACK_PROFILE = "entity_sensor"  # tried when sysObjectID matches no vendor profile
# A first poll may probe every profile's key column and walk a large table (a Sentry or Raritan
# chain, hundreds of ENTITY sensors): tens of requests, where a steady poll is one or two. Cut short
# at the steady deadline it would start again from nothing each time and never finish on a slow
# agent; 30 s still fails a dead device in bounded time, and costs a few samples once an hour.
DISCOVERY_DEADLINE_S = 30.0


def meta_value(value: int | float | str | Oid) -> int | str:
    """A value as a row condition compares it: integers stay, an OID becomes its dotted text
    (LIEBERT-GP tables name each row's quantity by an OID), anything else its text."""
    if isinstance(value, tuple):
        return oid_text(value)
    return value if isinstance(value, int | str) else str(value)


def shown_sys_object_id(value: object) -> str:
    """sysObjectID as an operator reads it: the OID, or what was wrong with it."""
    if value is None:
        return "missing (the agent does not answer 1.3.6.1.2.1.1.2.0)"
    if isinstance(value, tuple):
        return "." + oid_text(value) if value else "empty"
    return f"{value!r} (not an OID)"


class SnmpPduDriver:
    """Polls one PDU. ``engine`` is shared between PDUs when given (and then not closed here).

    Without one, every driver in the same event loop shares one engine of this module (closed when
    the last of them closes), so N PDUs never cost N engines.
    """

    KIND = "pdu"  # device prefix and the word used in messages
    WHAT = "SNMP PDU"
    PROFILES: Path = PROFILE_DIR
    FALLBACK: str | None = FALLBACK_PROFILE
    MAX_POWER_W = PDU_MAX_POWER_W  # only where the configuration has no max_power_w (PduConfig always has)

    def __init__(self, cfg: Any, engine: SnmpEngine | None = None, *, detail: bool | None = None) -> None:
        self.cfg = cfg
        self.device = f"{self.KIND}.{cfg.id}"
        self.interval_s = float(cfg.interval_s)
        self.detail = bool(getattr(cfg, "detail_signals", False)) if detail is None else detail
        self._own_engine = False  # True only for a private engine this driver must close
        self._engine = engine
        self._uses_loop_engine = False
        self._session: SnmpSession | None = None
        self._profile: Profile | None = None
        self._plan: PollPlan | None = None
        self._pruned = False
        self._discovered_at = 0.0  # time.monotonic() of the last table walk
        self._answered: set[tuple[int, ...]] = set()  # OIDs that gave a value since that walk
        self._counters: dict[tuple[int, ...], CounterDelta] = {}
        # energy for MIBs without an energy counter (ENTITY-SENSOR-MIB); a longer gap is unknown power
        self._integral = PowerIntegral(max_gap_s=3 * self.interval_s)
        self._rows: dict[str, int] = {}
        self.profile_reason: str | None = None  # how the profile was chosen, for poll --once and health
        self.polls = 0
        self.failures = 0
        self.discoveries = 0
        self.last_error: str | None = None
        self._validate()

    def _validate(self) -> None:
        """Plan without I/O: a named profile must exist and v3 protocol names must be known.

        Raises ``ValueError`` naming the PDU (the registry turns it into a device that reports it).
        """
        cfg = self.cfg
        try:
            if cfg.profile == "generic":
                self._profile = generic_profile(tuple(cfg.oids))
                self.profile_reason = 'configured: profile = "generic" with the oids listed'
            elif cfg.profile != "auto":
                self._profile = get_profile(cfg.profile, self.PROFILES, self.WHAT)
                self.profile_reason = f'configured: profile = "{cfg.profile}"'
            if str(cfg.version) == "3":
                protocol(AUTH_PROTOCOLS, cfg.auth_protocol, "SNMPv3 auth")
                protocol(PRIV_PROTOCOLS, cfg.priv_protocol, "SNMPv3 privacy")
        except (ProfileError, SnmpError) as exc:
            raise ValueError(f"{self.where}: {exc}") from None

    # -- public -------------------------------------------------------------------------------
    @property
    def where(self) -> str:
        return f"{self.KIND} '{self.cfg.id}' ({self.cfg.host}:{self.cfg.port})"

    @property
    def deadline_s(self) -> float:
        """This poll's bound: the steady-state deadline, or ``DISCOVERY_DEADLINE_S`` while the tables
        are still to be walked (the poller reads it before every poll)."""
        deadline = getattr(self.cfg, "deadline_s", None)
        steady = float(deadline) if deadline else 0.8 * self.interval_s
        return steady if self._plan is not None else max(steady, DISCOVERY_DEADLINE_S)

    @property
    def health(self) -> dict[str, Any]:
        """Counters for the agent's health report (energy counter resets/wraps included)."""
        return {
            "profile": self._profile.name if self._profile else None,
            "profile_reason": self.profile_reason,
            "polls": self.polls,
            "failures": self.failures,
            "discoveries": self.discoveries,
            "last_error": self.last_error,
            "energy_resets": sum(c.resets for c in self._counters.values()),
            "energy_wraps": sum(c.wraps for c in self._counters.values()),
            "rows": dict(self._rows),
            "oids_per_poll": len(self._plan.items) if self._plan else 0,
            "requests": self._session.requests if self._session else 0,
        }

    async def poll(self) -> PollResult:
        ts = time.time()
        t0 = time.perf_counter()
        self.polls += 1
        error: str | None = None
        signals: dict[str, float] = {}
        estimated: set[str] = set()
        try:
            signals, estimated = await asyncio.wait_for(self._poll_once(ts), self.deadline_s)
        except TimeoutError:
            error = f"{self.where}: no answer within the {self.deadline_s:g} s poll deadline"
        except (SnmpError, ProfileError) as exc:
            error = f"{self.where}: {exc}"
        except Exception as exc:  # a poll never raises: anything else is reported, not propagated
            error = f"{self.where}: unexpected {type(exc).__name__}: {exc}"
        if error:
            self.failures += 1
            self.last_error = error
        return PollResult(
            device=self.device, ts=ts, signals=signals, ok=error is None,
            elapsed_ms=(time.perf_counter() - t0) * 1000.0,
            profile=self._profile.name if self._profile else None, error=error,
            estimated=frozenset(estimated), profile_reason=self.profile_reason,
        )

    async def close(self) -> None:
        if self._own_engine and self._engine is not None:
            self._engine.close_dispatcher()
        if self._uses_loop_engine:
            _release_loop_engine()
            self._uses_loop_engine = False
        self._engine = None
        self._session = None

    def rediscover(self) -> None:
        """Forget the rows found on the device; the next poll walks the tables again."""
        self._plan = None
        self._pruned = False

    # -- one poll -----------------------------------------------------------------------------
    async def _poll_once(self, ts: float) -> tuple[dict[str, float], set[str]]:
        session = self._session or self._open_session()
        if self._profile is None:
            self._profile = await self._choose_profile(session)
        if not self._profile.metered:
            raise SnmpError(f"switched, not metered: {self._profile.title} has no power, energy or current "
                            "readings (outlet switching only), so this feed cannot be metered through it; "
                            "meter the feed upstream or remove this device from the configuration")
        if self._plan is not None and time.monotonic() - self._discovered_at > REDISCOVER_S:
            self.rediscover()
        if self._plan is None:
            self._plan = await self._discover(session, self._profile)
            self._discovered_at = time.monotonic()
            self._answered.clear()
        plan = self._plan
        if not plan.items:
            self._plan = None
            raise SnmpError(f"profile {self._profile.name}: the device has none of its rows")
        values = await session.get(plan.oids)
        decoded = decode(plan, values)
        if not decoded.totals:
            self.rediscover()
            raise SnmpError(f"profile {self._profile.name}: no readable value among {len(plan.items)} OIDs "
                            "(rows changed or wrong profile?); rediscovering at the next poll")
        if not self._pruned:
            self._plan = prune(plan, decoded.levels)
            self._pruned = True
        # An OID that answered before and is now noSuchInstance: a unit/inlet left (or the chain was
        # renumbered). Report this poll as it is and walk the tables again at the next one.
        vanished = any(v is None and oid in self._answered for oid, v in zip(plan.oids, values, strict=True))
        self._answered.update(oid for oid, v in zip(plan.oids, values, strict=True) if v is not None)
        if vanished:
            self.rediscover()
        return self._signals(ts, decoded)

    def _open_session(self) -> SnmpSession:
        cfg = self.cfg
        auth: CommunityData | UsmUserData
        if str(cfg.version) == "3":
            if not cfg.user:
                raise SnmpError('version = "3" needs user')
            auth_key = read_secret(cfg.auth_key_file) if cfg.auth_key_file else None
            priv_key = read_secret(cfg.priv_key_file) if cfg.priv_key_file else None
            auth = v3_auth(cfg.user, auth_key, priv_key, cfg.auth_protocol, cfg.priv_protocol)
        else:
            if cfg.community_file is None:
                raise SnmpError('version = "2c" needs community_file')
            auth = CommunityData(read_secret(cfg.community_file), mpModel=1)  # mpModel 1: SNMPv2c
        if self._engine is None:
            self._engine = _acquire_loop_engine()
            self._uses_loop_engine = True
        if isinstance(auth, UsmUserData) and not _claim_usm_user(self._engine, auth):
            # pysnmp keys USM users by name per engine: the same user with other keys on another PDU
            # would overwrite this one's, so this PDU gets an engine of its own.
            self._engine, self._own_engine = SnmpEngine(), True
        self._session = SnmpSession(self._engine, auth, cfg.host, int(cfg.port), float(cfg.timeout_s),
                                    int(cfg.retries), context=getattr(cfg, "context", "") or "")
        return self._session

    async def _choose_profile(self, session: SnmpSession) -> Profile:
        """By sysObjectID (longest prefix), confirmed by the profile's tables; else by probing each
        profile's key column; else the generic fallback. ``profile_reason`` says which and why."""
        (value,) = await session.get([SYS_OBJECT_ID])
        shown = shown_sys_object_id(value)
        tried: set[str] = set()
        why_not = f"sysObjectID {shown}"
        if isinstance(value, tuple) and value:
            found = match_sys_object_id(value, self.PROFILES)
            if found is None:
                why_not = f"sysObjectID {shown} matches no profile"
            else:
                profile, prefix = found
                tried.add(profile.name)
                why = f"sysObjectID {shown} starts with .{oid_text(prefix)}"
                if await self._usable(session, profile, why):
                    return profile
                why_not = f"sysObjectID {shown} names {profile.name}, but the device has none of its rows"
        skip = tried | {self.FALLBACK}
        vendors = [p for name, p in builtin_profiles(self.PROFILES).items() if name not in skip]
        for profile in vendors:
            probe = await self._answering(session, profile.probe_oids)
            if probe is None:
                continue
            why = f"{why_not}; probed key OIDs: .{oid_text(probe)} answered"
            if await self._usable(session, profile, why):
                return profile
        if self.FALLBACK is not None:
            fallback = get_profile(self.FALLBACK, self.PROFILES, self.WHAT)
            if await self._usable(session, fallback, f"{why_not}; no vendor profile's key OIDs answered; "
                                                     f"{fallback.title} found"):
                return fallback
        raise SnmpError(self._nothing_found(why_not, len(vendors)))

    def _nothing_found(self, why_not: str, probed: int) -> str:
        return (f"not a PDU, no PDU readings: {why_not}; none of the key OIDs of {probed} vendor profiles "
                "answered and it has no ENTITY-SENSOR-MIB power-supply watts/amperes/volts sensors. "
                'If it is a PDU, set profile = "<name>", or "generic" with oids')

    @staticmethod
    async def _answering(session: SnmpSession, columns: tuple[Oid, ...]) -> Oid | None:
        """The first of ``columns`` that has rows on the device, if any."""
        for column in columns:
            if await session.has_rows(column):
                return column
        return None

    async def _usable(self, session: SnmpSession, profile: Profile, why: str) -> bool:
        """Whether the device has this profile's rows (planned now, kept for the first poll)."""
        if not profile.metered:
            found = profile.probe is not None and await session.has_rows(profile.probe)
        else:
            plan = await self._discover(session, profile)
            # scalars are planned whether or not the device has them: then its key OIDs must answer
            from_rows = any(item.measure.table is not None for item in plan.items)
            found = from_rows or (bool(plan.items)
                                  and await self._answering(session, profile.probe_oids) is not None)
            if found:
                self._plan = plan
                self._discovered_at = time.monotonic()
        if found:
            self.profile_reason = why
        return found

    async def _discover(self, session: SnmpSession, profile: Profile) -> PollPlan:
        """Walk each table once, read its meta columns, and plan the OIDs to poll."""
        rows: dict[str, list[Row]] = {}
        counts: dict[str, int] = {}
        used = {m.table for m in profile.measures if m.table}
        for name in sorted(used):
            table = profile.tables[name]
            try:
                walked = await session.walk(table.walk)
            except SnmpError as exc:
                raise SnmpError(f"walking table {name} ({oid_text(table.walk)}): {exc}") from None
            found = [Row(index, {"walk": meta_value(v)}) for index, v in walked if v is not None]
            found = [row for row in found if keep_by_index(table, row)]  # before reading per-row meta
            if table.meta and found:
                await self._read_meta(session, name, found, {m: (c, None) for m, c in table.meta.items()})
            if table.lookup and found:
                await self._read_meta(session, name, found, dict(table.lookup))
            rows[name] = [row for row in found if keep_row(table, row)]
            counts[name] = len(rows[name])
        self._rows = counts
        self.discoveries += 1
        return build_plan(profile, rows)

    @staticmethod
    async def _read_meta(session: SnmpSession, table: str, rows: list[Row],
                         columns: dict[str, tuple[Oid, str | None]]) -> None:
        """Read each meta column once per row: at the row's index, or at the index held in ``via``."""
        wanted: list[tuple[Row, str, tuple[int, ...]]] = []
        for row in rows:
            for name, (column, via) in columns.items():
                if via is None:
                    wanted.append((row, name, column + row.index))
                elif isinstance(row.meta.get(via), int):
                    wanted.append((row, name, (*column, int(row.meta[via]))))
        try:
            values = await session.get([oid for _, _, oid in wanted])
        except SnmpError as exc:
            raise SnmpError(f"reading table {table} settings: {exc}") from None
        for (row, name, _), value in zip(wanted, values, strict=True):
            if value is not None:
                row.meta[name] = meta_value(value)

    # -- signals ------------------------------------------------------------------------------
    def _signals(self, ts: float, decoded: Decoded) -> tuple[dict[str, float], set[str]]:
        assert self._plan is not None and self._profile is not None
        prefix = self.device
        for item in self._plan.items:
            if item.measure.signal == "energy_kwh" and item.oid in decoded.raw:
                counter = self._counters.setdefault(item.oid, CounterDelta(wrap_at=item.measure.wrap_at))
                counter.update(float(decoded.raw[item.oid]))
        totals = dict(decoded.totals)
        estimated = set(decoded.estimated)
        power = totals.get("power_w")
        limit = float(getattr(self.cfg, "max_power_w", self.MAX_POWER_W))
        if power is not None and not 0.0 <= power <= limit:
            del totals["power_w"]  # physically impossible for this feed: missing, not a spike
            self.last_error = f"{self.where}: power {power:g} W outside 0..{limit:g} W, dropped"
            power = None
        if self._profile.integrate_energy and "energy_kwh" not in totals:
            if power is not None:
                self._integral.add(ts, power)
            if self._integral.total_j is not None:
                totals["energy_kwh"] = self._integral.total_j / J_PER_KWH
                estimated.add("energy_kwh")
        signals = {f"{prefix}.{name}": value for name, value in totals.items()}
        if self.detail:
            signals.update({f"{prefix}.{name}": value for name, value in decoded.per_row.items()})
        return signals, {f"{prefix}.{name}" for name in estimated}


# One engine per running event loop (pysnmp binds its transports to the loop that created them).
_LOOP_ENGINES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = weakref.WeakKeyDictionary()


def _acquire_loop_engine() -> SnmpEngine:
    loop = asyncio.get_running_loop()
    entry = _LOOP_ENGINES.get(loop)
    if entry is None:
        entry = _LOOP_ENGINES[loop] = [SnmpEngine(), 0]
    entry[1] += 1
    engine: SnmpEngine = entry[0]
    return engine


def _release_loop_engine() -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    entry = _LOOP_ENGINES.get(loop)
    if entry is not None:
        entry[1] -= 1
        if entry[1] <= 0:
            entry[0].close_dispatcher()
            del _LOOP_ENGINES[loop]


def _claim_usm_user(engine: SnmpEngine, auth: UsmUserData) -> bool:
    """Register this user's keys on the shared engine; False if the name is taken with other keys."""
    users = engine.get_user_context("rackwatt_usm_users")
    if users is None:
        users = {}
        engine.set_user_context(rackwatt_usm_users=users)
    key = (auth.authentication_key, auth.privacy_key, auth.authentication_protocol, auth.privacy_protocol)
    return users.setdefault(auth.userName, key) == key
