"""``rackwatt demo --metrics/--site/--rack``: what the Prometheus and watch tests start demos with."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from agent.config.loader import load_config
from agent.live import demo_cmd
from agent.live.demo.setup import Intervals, MqttTarget, pick_ports, write_config


def parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo_cmd.configure(parser)
    return parser.parse_args(list(args))


def test_site_rack_and_metrics_options() -> None:
    args = parse("--site", "dc9", "--rack", "r-03", "--metrics", "127.0.0.1:9860")
    assert (args.site, args.rack, args.metrics) == ("dc9", "r-03", MqttTarget("127.0.0.1", 9860))
    assert (parse().site, parse().rack, parse().metrics) == ("demo", "r07", None)


def test_a_rack_name_that_cannot_be_a_topic_level_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--rack", "r/3")
    assert "used in MQTT topics" in capsys.readouterr().err


def test_the_generated_config_serves_metrics_where_asked(tmp_path: Path) -> None:
    intervals = Intervals(tick_s=1.0, nvml_s=5.0, pdu_s=10.0, crac_s=20.0, inlet_s=20.0, summary_s=300.0)
    path, _ = write_config(
        tmp_path,
        site="dc9",
        rack="r03",
        ports=pick_ports(),
        crac_id="1",
        crac_share=0.5,
        intervals=intervals,
        mqtt=None,
        metrics=MqttTarget("127.0.0.1", 9861),
    )
    config = load_config(path)
    assert config.metrics.enabled and (config.metrics.address, config.metrics.port) == ("127.0.0.1", 9861)
    assert (config.agent.site, config.agent.rack) == ("dc9", "r03")
