"""SLO files: the shipped examples, objective syntax, durations and every validation error."""

import math
import re
from datetime import timedelta
from pathlib import Path

import pytest

from warehouse.errors import QueryError
from warehouse.query import slo as slo_module
from warehouse.query.slo import (
    SLO,
    Objective,
    load_slo,
    parse_objective,
    parse_slo,
    shipped_slos,
)

MINIMAL = 'objectives = ["error_rate <= 0.01"]\n'

FULL = """
name = "chat"
description = "Interactive chat."
target = 0.995
window = "1m"
period = "7d"
burn_windows = ["5m", "1h"]

[scope]
service = ["chat", "chat-v2"]
tenant = "acme"
"attrs['gpu']" = "h100"

[thresholds]
ttft_ms = 200
tpot_ms = 50.5

[[objectives]]
objective = "p95(ttft_ms) <= 200"
weight = 3

[[objectives]]
objective = "decode_tps > 20"
"""


def write(tmp_path: Path, text: str, name: str = "chat.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- shipped examples -------------------------------------------------------------------


def test_shipped_names():
    assert shipped_slos() == ["batch-summarization", "chat-assistant", "code-completion"]


@pytest.mark.parametrize("name", ["batch-summarization", "chat-assistant", "code-completion"])
def test_each_shipped_slo_loads_and_is_complete(name):
    seen = []
    slo = load_slo(name, validate_measure=seen.append)
    assert slo.name == name
    assert slo.description
    assert 0 < slo.target < 1
    assert slo.window < slo.period
    assert slo.objectives and slo.thresholds and slo.scope
    assert seen == [o.measure for o in slo.objectives]
    assert Path(slo.source).name == f"{name}.toml"
    assert all(label.isalnum() for label, _ in slo.burn_windows)


def test_shipped_examples_fit_their_scenarios():
    chat = load_slo("chat-assistant")
    assert chat.thresholds["ttft_ms"] <= 300 and chat.thresholds["tpot_ms"] <= 50
    batch = {o.measure: o for o in load_slo("batch-summarization").objectives}
    assert batch["p95_e2e_ms"].value >= 30_000
    assert batch["decode_tps"].op == ">="
    assert batch["error_rate"].value <= 0.001
    code = {o.measure: o for o in load_slo("code-completion").objectives}
    assert code["p95_e2e_ms"].value <= 500


def test_unknown_shipped_name_lists_the_shipped_ones():
    with pytest.raises(QueryError, match=r"unknown SLO 'chat'.*chat-assistant, code-completion"):
        load_slo("chat")


def test_bare_name_means_shipped_even_if_a_local_file_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, 'name = "local"\n' + MINIMAL, "chat-assistant")
    assert load_slo("chat-assistant").name == "chat-assistant"
    assert load_slo("./chat-assistant").name == "local"


def test_missing_file(tmp_path):
    with pytest.raises(QueryError, match=r"nope\.toml: no such SLO file"):
        load_slo(tmp_path / "nope.toml")


# --- reading a file ---------------------------------------------------------------------


def test_full_file(tmp_path):
    slo = load_slo(write(tmp_path, FULL))
    assert slo == SLO(
        name="chat",
        description="Interactive chat.",
        target=0.995,
        window=timedelta(minutes=1),
        period=timedelta(days=7),
        burn_windows=(("5m", timedelta(minutes=5)), ("1h", timedelta(hours=1))),
        scope={"service": ("chat", "chat-v2"), "tenant": ("acme",), "attrs['gpu']": ("h100",)},
        thresholds={"ttft_ms": 200.0, "tpot_ms": 50.5},
        objectives=(
            Objective("p95_ttft_ms", "<=", 200.0, 3.0, "p95(ttft_ms) <= 200"),
            Objective("decode_tps", ">", 20.0, 1.0, "decode_tps > 20"),
        ),
        source=str(tmp_path / "chat.toml"),
    )
    assert slo.filters() == {
        "service": ["chat", "chat-v2"],
        "tenant": ["acme"],
        "attrs['gpu']": ["h100"],
    }
    assert slo.measures == ("p95_ttft_ms", "decode_tps")
    assert math.isclose(slo.error_budget, 0.005)
    hash(slo)


def test_defaults_and_name_from_file_stem(tmp_path):
    slo = load_slo(str(write(tmp_path, MINIMAL, "my-slo.toml")))
    assert slo.name == "my-slo"
    assert slo.description == ""
    assert slo.target == 0.99
    assert slo.window == timedelta(minutes=5)
    assert slo.period == timedelta(days=30)
    assert [label for label, _ in slo.burn_windows] == ["5m", "1h", "6h"]
    assert slo.scope == {} and slo.thresholds == {} and slo.filters() == {}
    assert slo.objectives == (Objective("error_rate", "<=", 0.01, 1.0, "error_rate <= 0.01"),)


def test_thresholds_alone_are_enough(tmp_path):
    slo = load_slo(write(tmp_path, "[thresholds]\ne2e_ms = 1800\n"))
    assert slo.thresholds == {"e2e_ms": 1800.0} and slo.objectives == ()


def test_a_file_is_parsed_once_per_text_and_an_edit_is_read_at_the_next_load(tmp_path, monkeypatch):
    parsed = []
    monkeypatch.setattr(slo_module._Reader, "read", counted(slo_module._Reader.read, parsed))
    path = write(tmp_path, "[thresholds]\ne2e_ms = 1800\n")
    first = load_slo(path)
    second = load_slo(path)
    assert second == first and len(parsed) == 1
    second.thresholds["e2e_ms"] = 1.0  # each caller's own: the next load is not changed
    assert load_slo(path).thresholds == {"e2e_ms": 1800.0}
    path.write_text("[thresholds]\ne2e_ms = 900\n")
    assert load_slo(path).thresholds == {"e2e_ms": 900.0} and len(parsed) == 2


def counted(method, calls):
    def wrapper(*args, **kwargs):
        calls.append(args)
        return method(*args, **kwargs)

    return wrapper


def test_parse_slo_from_text_needs_a_name():
    assert parse_slo('name = "x"\n' + MINIMAL).name == "x"
    with pytest.raises(QueryError, match="<string>: name: required"):
        parse_slo(MINIMAL)


# --- objectives -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "measure", "op", "value"),
    [
        ("p95(ttft_ms) <= 200", "p95_ttft_ms", "<=", 200.0),
        ("p99.9(e2e_ms) < 5000", "p999_e2e_ms", "<", 5000.0),
        ("p999(e2e_ms) < 5000", "p999_e2e_ms", "<", 5000.0),
        ("p50( tpot_ms )>=1", "p50_tpot_ms", ">=", 1.0),
        ("avg(ttft_ms) > 1e2", "avg_ttft_ms", ">", 100.0),
        ("sum(output_tokens) >= 1000", "sum_output_tokens", ">=", 1000.0),
        ("p95_ttft_ms <= 200", "p95_ttft_ms", "<=", 200.0),
        ("p999_tpot_ms<=80", "p999_tpot_ms", "<=", 80.0),
        ("  error_rate <= .005 ", "error_rate", "<=", 0.005),
        ("attainment >= 0.99", "attainment", ">=", 0.99),
    ],
)
def test_objective_forms(text, measure, op, value):
    objective = parse_objective(text)
    assert (objective.measure, objective.op, objective.value) == (measure, op, value)
    assert objective.text == text.strip()


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("p95(ttft_ms) =< 200", "expected <measure> <=|<|>=|> <number>"),
        ("error_rate == 0", "expected <measure>"),
        ("error_rate", "expected <measure>"),
        ("<= 3", "expected <measure>"),
        ("error_rate <= low", "'low' is not a number"),
        ("error_rate <= nan", "finite number"),
        ("Error_Rate <= 1", "'Error_Rate' is not a measure name"),
        ("p97(ttft_ms) <= 1", "percentile 'p97' is not one of p50, p75, p90, p95, p99, p99.9"),
        ("max(ttft_ms) <= 1", "unknown function 'max'"),
        ("p95(TTFT) <= 1", "'TTFT' is not a column name"),
        ("p95() <= 1", "'' is not a column name"),
    ],
)
def test_objective_syntax_errors(text, complaint):
    with pytest.raises(ValueError) as info:
        parse_objective(text)
    assert str(info.value).startswith(f'cannot read "{text.strip()}": ')
    assert complaint in str(info.value)


def test_objective_holds():
    at_most = parse_objective("p95(ttft_ms) <= 200")
    assert at_most.holds(200) and at_most.holds(10) and not at_most.holds(200.1)
    assert not at_most.holds(math.nan) and not at_most.holds(None)
    below = parse_objective("error_rate < 0.01")
    assert below.holds(0.0) and not below.holds(0.01)
    at_least = parse_objective("decode_tps >= 20")
    assert at_least.holds(20) and not at_least.holds(19.9) and not at_least.holds(math.nan)
    above = parse_objective("attainment > 0.9")
    assert above.holds(0.95) and not above.holds(0.9)
    assert str(at_least) == "decode_tps >= 20"
    assert str(Objective("p95_ttft_ms", "<=", 200.0)) == "p95_ttft_ms <= 200"  # no text given


def test_a_burn_window_may_be_as_long_as_the_period(tmp_path):
    slo = load_slo(write(tmp_path, 'period = "1h"\nburn_windows = ["5m", "1h"]\n' + MINIMAL))
    assert slo.burn_windows == (("5m", timedelta(minutes=5)), ("1h", timedelta(hours=1)))


def test_objective_error_in_file_names_file_and_index(tmp_path):
    text = (
        '[[objectives]]\nobjective = "error_rate <= 0.01"\n'
        '[[objectives]]\nobjective = "p95(e2e_ms) <= 1800"\n'
        '[[objectives]]\nobjective = "p95(ttft_ms) =< 200"\n'
    )
    with pytest.raises(QueryError) as info:
        load_slo(write(tmp_path, text))
    path = tmp_path / "chat.toml"
    assert str(info.value) == (
        f'{path}: objectives[2]: cannot read "p95(ttft_ms) =< 200": '
        "expected <measure> <=|<|>=|> <number>"
    )


def test_shipped_file_errors_name_the_file_only():
    with pytest.raises(QueryError, match=r"^chat-assistant\.toml: objectives\[0\]: "):
        load_slo("chat-assistant", validate_measure=_reject_all)


# --- the measure callback ---------------------------------------------------------------


def _reject_all(name: str) -> None:
    raise KeyError(name)


def test_validate_measure_is_called_with_normalised_names(tmp_path):
    seen = []
    load_slo(write(tmp_path, FULL), validate_measure=seen.append)
    assert seen == ["p95_ttft_ms", "decode_tps"]


def test_validate_measure_error_is_wrapped(tmp_path):
    known = {"error_rate", "p95_ttft_ms"}

    def validate(name: str) -> None:
        if name not in known:
            raise QueryError(f"unknown measure {name!r}; known: {', '.join(sorted(known))}")

    text = 'objectives = ["error_rate <= 0.01", "p95(queue_time) <= 5"]\n'
    with pytest.raises(QueryError) as info:
        load_slo(write(tmp_path, text), validate_measure=validate)
    assert str(info.value) == (
        f"{tmp_path / 'chat.toml'}: objectives[1]: 'p95(queue_time) <= 5': "
        "unknown measure 'p95_queue_time'; known: error_rate, p95_ttft_ms"
    )
    assert isinstance(info.value.__cause__, QueryError)


# --- validation errors: each names the file and the key ----------------------------------


@pytest.mark.parametrize(
    ("toml", "key", "complaint"),
    [
        ("nmae = 'x'\n" + MINIMAL, "nmae", "unknown key"),
        ("name = ''\n" + MINIMAL, "name", "must not be empty"),
        ("name = 3\n" + MINIMAL, "name", "must be a string"),
        ("description = ['x']\n" + MINIMAL, "description", "must be a string"),
        ("target = 1\n" + MINIMAL, "target", "between 0 and 1"),
        ("target = 0\n" + MINIMAL, "target", "between 0 and 1"),
        ("target = 99.0\n" + MINIMAL, "target", "between 0 and 1"),
        ("target = '0.99'\n" + MINIMAL, "target", "must be a number"),
        ("target = true\n" + MINIMAL, "target", "must be a number"),
        ("target = nan\n" + MINIMAL, "target", "finite"),
        ("window = '5x'\n" + MINIMAL, "window", "bad duration '5x'"),
        ("window = 300\n" + MINIMAL, "window", "duration string"),
        ("period = '0d'\n" + MINIMAL, "period", "longer than zero"),
        ("window = '30d'\n" + MINIMAL, "window", "shorter than the period"),
        ("window = '1h'\nperiod = '1h'\n" + MINIMAL, "window", "shorter than the period"),
        ("burn_windows = '1h'\n" + MINIMAL, "burn_windows", "must be a list"),
        ("burn_windows = ['5m', '-1h']\n" + MINIMAL, r"burn_windows\[1\]", "bad duration"),
        (
            "burn_windows = ['5m', '60d']\n" + MINIMAL,
            r"burn_windows\[1\]",
            "longer than the period",
        ),
        ("burn_windows = ['1h', '60m']\n" + MINIMAL, r"burn_windows\[1\]", "repeats '1h'"),
        (MINIMAL + "scope = 'chat'\n", "scope", "must be a table"),
        (MINIMAL + "[scope]\nservice = []\n", "scope.service", "non-empty list"),
        (MINIMAL + "[scope]\nservice = [1]\n", "scope.service", "must be strings"),
        (MINIMAL + "[scope]\nservice = {a = 1}\n", "scope.service", "non-empty list"),
        (MINIMAL + "[scope]\n'bad key' = 'x'\n", "scope.bad key", "not a dimension name"),
        (MINIMAL + "[scope]\n\"attrs[gpu]\" = 'x'\n", r"scope.attrs\[gpu\]", "not a dimension"),
        (MINIMAL + "thresholds = 5\n", "thresholds", "must be a table"),
        ("[scope]\nservice = 'chat'\n" + MINIMAL, "scope.objectives", "move it above"),
        ("[thresholds]\nttft_ms = 1\ntarget = 0.9\n", "thresholds.target", "top-level key"),
        (MINIMAL + "[thresholds]\nttft = 200\n", "thresholds.ttft", "not a latency column"),
        (MINIMAL + "[thresholds]\nttft_ms = 0\n", "thresholds.ttft_ms", "above zero"),
        (MINIMAL + "[thresholds]\nttft_ms = -1\n", "thresholds.ttft_ms", "above zero"),
        (MINIMAL + "[thresholds]\nttft_ms = '200'\n", "thresholds.ttft_ms", "must be a number"),
        ("objectives = 'error_rate <= 1'\n", "objectives", "must be an array"),
        ("objectives = [1]\n", r"objectives\[0\]", "must be a table"),
        ("[[objectives]]\nweight = 2\n", r"objectives\[0\]", "missing objective"),
        ("[[objectives]]\nobjective = 5\n", r"objectives\[0\]", "is a string"),
        (
            "[[objectives]]\nobjective = 'error_rate <= 1'\nweigth = 2\n",
            r"objectives\[0\]\.weigth",
            "unknown key",
        ),
        (
            "[[objectives]]\nobjective = 'error_rate <= 1'\nweight = 0\n",
            r"objectives\[0\]\.weight",
            "above zero",
        ),
        (
            "[[objectives]]\nobjective = 'error_rate <= 1'\nweight = 'high'\n",
            r"objectives\[0\]\.weight",
            "must be a number",
        ),
    ],
)
def test_validation_errors_name_file_and_key(tmp_path, toml, key, complaint):
    with pytest.raises(QueryError, match=rf"^{_file(tmp_path)}: {key}: .*{complaint}"):
        load_slo(write(tmp_path, toml))


def _file(tmp_path: Path) -> str:
    return re.escape(str(tmp_path / "chat.toml"))


def test_neither_thresholds_nor_objectives(tmp_path):
    with pytest.raises(QueryError, match=r"chat\.toml: an SLO needs \[thresholds\]"):
        load_slo(write(tmp_path, "name = 'x'\n[thresholds]\n"))


def test_invalid_toml(tmp_path):
    with pytest.raises(QueryError, match=r"chat\.toml: not valid TOML: .*line 1"):
        load_slo(write(tmp_path, "target = \n"))


# --- durations --------------------------------------------------------------------------
