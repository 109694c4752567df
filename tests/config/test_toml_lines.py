"""The key locator: line numbers of keys, [[array]] items and inline array elements."""

from __future__ import annotations

import tomllib

from agent.config.toml_lines import locate_keys

DOC = """\
# comment with = and [brackets]
[agent]
site = "x"  # trailing comment
"quoted key" = 'literal'
dotted.inner = 1

[[pdu]]
id = "a"
oids = [
  { oid = "1.2", signal = "p" },  # comment
  { oid = "1.3", signal = "q" },
]
[[pdu]]
id = "b"
notes = \"\"\"
fake = 1
[not_a_table]
\"\"\"
[[pdu.extra]]
y = 2
[mqtt]
nested = [[1, 2], [3]]
port = 1883
"""


def test_locates_keys_tables_and_array_items() -> None:
    tomllib.loads(DOC)  # the locator only sees valid TOML
    lines = locate_keys(DOC)
    assert lines[("agent",)] == 2
    assert lines[("agent", "site")] == 3
    assert lines[("agent", "quoted key")] == 4
    assert lines[("agent", "dotted", "inner")] == 5
    assert lines[("pdu", 0)] == 7 and lines[("pdu", 0, "id")] == 8
    assert lines[("pdu", 0, "oids", 1, "signal")] == 11
    assert lines[("pdu", 1)] == 13 and lines[("pdu", 1, "notes")] == 15
    assert ("fake",) not in lines and ("pdu", 1, "fake") not in lines and ("not_a_table",) not in lines
    assert lines[("pdu", 1, "extra", 0, "y")] == 20
    assert lines[("mqtt", "nested", 1, 0)] == 22
    assert lines[("mqtt", "port")] == 23


def test_stops_quietly_on_text_it_does_not_understand() -> None:
    assert locate_keys('[agent]\nsite = "x"\n???\nrack = "y"\n') == {("agent",): 1, ("agent", "site"): 2}
