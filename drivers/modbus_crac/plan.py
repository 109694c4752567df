"""Group a cooling unit's points into as few read requests as the protocol allows: points of one
table at most ``bridge_gap`` registers apart share a request of at most ``max_registers``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drivers.modbus_crac.profiles import Point

MODBUS_MAX_REGISTERS = 125


@dataclass(frozen=True)
class Batch:
    function_code: int  # 3 holding, 4 input
    start: int
    count: int
    points: tuple[Point, ...]

    def words_of(self, point: Point, registers: list[int]) -> list[int]:
        offset = point.address - self.start
        return registers[offset : offset + point.width]


def plan_batches(
    points: Iterable[Point], max_registers: int = MODBUS_MAX_REGISTERS, bridge_gap: int = 0
) -> list[Batch]:
    """Requests covering every point, ordered by function code then address."""
    max_registers = min(max_registers, MODBUS_MAX_REGISTERS)
    ordered = sorted(points, key=lambda p: (p.function_code, p.address, p.width))
    batches: list[Batch] = []
    current: list[Point] = []
    start = end = 0  # end: one past the last register covered
    for point in ordered:
        point_end = point.address + point.width
        fits = (
            current
            and point.function_code == current[0].function_code
            and point.address <= end + bridge_gap
            and max(end, point_end) - start <= max_registers
        )
        if fits:
            current.append(point)
            end = max(end, point_end)
            continue
        if current:
            batches.append(Batch(current[0].function_code, start, end - start, tuple(current)))
        current, start, end = [point], point.address, point_end
    if current:
        batches.append(Batch(current[0].function_code, start, end - start, tuple(current)))
    return batches


def single_batches(batch: Batch) -> list[Batch]:
    """One request per point of ``batch`` (used after an "illegal address" answer)."""
    return [Batch(batch.function_code, p.address, p.width, (p,)) for p in batch.points]
