"""The dcgm-exporter driver against a real recorded exporter output and rendered ones, served
over HTTP on loopback."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from drivers.dcgm_exporter.config import DcgmSection
from drivers.dcgm_exporter.driver import DcgmExporterDriver
from drivers.dcgm_exporter.exposition import ExpositionError, parse_exposition
from tests.drivers.dcgm.exporter_server import Served, exporter, render

RECORDED = Path(__file__).parent / "recorded" / "datadog-t4-metrics.txt"


def poll(driver: DcgmExporterDriver):
    return asyncio.run(driver.poll())


def test_recorded_t4_output_parses_to_the_recorded_values() -> None:
    (gpu,) = parse_exposition(RECORDED.read_text())
    assert (gpu.model, gpu.hostname, gpu.index) == ("Tesla T4", "424773df46e0", 0)
    assert gpu.values == pytest.approx({
        "power_w": 8.969, "energy_j": 128996.013, "temp_c": 25.0, "util_pct": 0.0,
        "mem_util_pct": 0.0, "sm_clock_mhz": 300.0,
    })


def test_recorded_output_served_over_http_lands_on_the_rack_wide_index() -> None:
    served = Served(RECORDED.read_bytes())
    with exporter(served) as url:
        driver = DcgmExporterDriver(DcgmSection(id="n2", url=url, gpu_count=1, first_gpu=8))
        result = poll(driver)
    assert result.ok and result.error is None, result.error
    assert result.device == "dcgm.n2"
    assert result.signals["gpu.8.power_w"] == pytest.approx(8.969)
    assert result.signals["gpu.8.energy_j"] == pytest.approx(128996.013)
    assert not any(name.startswith("gpu.0.") for name in result.signals)


def test_mig_instances_and_pod_labels_count_each_gpu_once_and_blanks_are_absent() -> None:
    gpus = [{"DCGM_FI_DEV_POWER_USAGE": 300.0 + i, "DCGM_FI_DEV_GPU_TEMP": 50.0} for i in range(8)]
    gpus[3]["DCGM_FI_DEV_GPU_TEMP"] = float(0x7FFFFFF0)  # DCGM_INT32_BLANK: no value
    with exporter(Served(render(gpus, mig_on=(1,), pod_on=(2,)))) as url:
        result = poll(DcgmExporterDriver(DcgmSection(id="n0", url=url)))
    powers = [result.signals[f"gpu.{i}.power_w"] for i in range(8)]
    assert powers == pytest.approx([300.0 + i for i in range(8)])
    assert "gpu.3.temp_c" not in result.signals
    assert result.signals["gpu.4.temp_c"] == 50.0


def test_energy_counter_reset_keeps_energy_rising_and_is_counted() -> None:
    served = Served()
    with exporter(served) as url:
        driver = DcgmExporterDriver(DcgmSection(id="n0", url=url, gpu_count=1))
        seen = []
        for raw_mj in (1_000_000.0, 1_100_000.0, 5_000.0, 25_000.0):  # a driver reload after the 2nd
            served.body = render([{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": raw_mj}])
            result = poll(driver)
            seen.append((result.signals["gpu.0.energy_j"], result.signals["gpu.0.energy_resets"]))
    assert seen == [(1000.0, 0.0), (1100.0, 0.0), (1105.0, 1.0), (1125.0, 1.0)]


def test_a_node_with_fewer_gpus_reports_them_missing_and_keeps_the_others() -> None:
    gpus = [{"DCGM_FI_DEV_POWER_USAGE": 400.0}] * 6
    with exporter(Served(render(gpus))) as url:
        result = poll(DcgmExporterDriver(DcgmSection(id="n1", url=url, gpu_count=8, first_gpu=8)))
    assert result.ok
    assert [f"gpu.{i}.power_w" in result.signals for i in range(8, 16)] == [True] * 6 + [False] * 2
    assert "shows 6 of 8 GPUs" in (result.error or "")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_node_that_is_down_fails_with_its_host_and_port() -> None:
    port = _closed_port()
    result = poll(DcgmExporterDriver(DcgmSection(id="n3", url=f"http://127.0.0.1:{port}/metrics")))
    assert not result.ok and result.signals == {}
    assert f"127.0.0.1:{port}" in (result.error or "") and "refused" in (result.error or "")


def test_a_hung_exporter_is_cut_at_the_deadline() -> None:
    served = Served(render([{"DCGM_FI_DEV_POWER_USAGE": 1.0}]), delay_s=1.5)
    with exporter(served) as url:
        driver = DcgmExporterDriver(DcgmSection(id="n0", url=url, timeout_s=0.3))
        result = poll(driver)
    assert not result.ok and "no answer within 0.3 s" in (result.error or "")
    assert result.elapsed_ms < 1200


@pytest.mark.parametrize(("body", "status", "expected"), [
    (b"<html>login</html>", 200, "not Prometheus text"),
    (b"# HELP up x\n# TYPE up gauge\nup 1\n", 200, "no DCGM_FI_DEV_"),
    (b"", 401, "HTTP 401"),
    (b"", 500, "HTTP 500"),
])
def test_wrong_answers_get_a_clear_error(body: bytes, status: int, expected: str) -> None:
    with exporter(Served(body, status=status)) as url:
        result = poll(DcgmExporterDriver(DcgmSection(id="n0", url=url)))
    assert not result.ok and expected in (result.error or ""), result.error
    assert "dcgm node 'n0' (127.0.0.1:" in (result.error or "")


def test_basic_auth_is_sent_when_configured(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    served = Served(render([{"DCGM_FI_DEV_POWER_USAGE": 1.0}]))
    with exporter(served) as url:
        poll(DcgmExporterDriver(DcgmSection(id="n0", url=url, gpu_count=1, username="rw",
                                            password_file=secret)))
    assert served.auth_headers == ["Basic cnc6czNjcmV0"]  # base64("rw:s3cret")


def test_exposition_errors_name_the_problem() -> None:
    with pytest.raises(ExpositionError, match="not an index"):
        parse_exposition('DCGM_FI_DEV_POWER_USAGE{gpu="x",UUID="GPU-1"} 1\n')
