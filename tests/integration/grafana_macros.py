"""How a panel's SQL reaches ClickHouse through Grafana and grafana-clickhouse-datasource.

Written for these tests from the behaviour of the plugin's sources (no code copied):

1. Frontend, ``src/data/CHDatasource.ts``: ``applyTemplateVariables`` first calls
   ``applyConditionalAll``: from the last ``$__conditionalAll(`` backwards, the arguments
   are split at commas of bracket depth 1 (``getMacroArgs``); with exactly two, the
   variable named in the second (``$var`` or ``${var}``) is looked up, and when its
   current value, as a string, is ``''`` or ``'$__all'`` the macro becomes ``1=1``,
   otherwise its first argument (untrimmed). The text replaced is the macro as
   reassembled from its two arguments.
2. Grafana's ``templateSrv.replace(sql, scopedVars, format)`` with the plugin's
   ``format``: an array of values becomes ``'a','b'`` (joined, quoted, no escaping), a
   single value is inserted bare. "All" without a custom all value stands for every
   option. ``$var``, ``${var}`` and ``[[var]]`` are replaced; names that are no variable
   (``$__timeFilter``, ``$__interval_s``...) are left alone.
3. Backend, grafana-plugin-sdk-go ``data/sqlutil/macros.go`` ``Interpolate`` (as sqlds
   calls it) with the plugin's table ``pkg/macros/macros.go`` ``Macros`` merged over
   sqlutil's defaults: macro names are applied longest first; each ``$__name\\b`` match
   takes an argument list only when ``(`` follows immediately (``parseArgs``: split at
   depth-1 commas, trimmed); every occurrence of the matched text is replaced.
   The plugin's expansions (``pkg/macros/macros.go``):
     $__timeFilter(c)    c >= toDateTime(<from s>) AND c <= toDateTime(<to s>)
     $__timeFilter_ms(c) c >= fromUnixTimestamp64Milli(<from ms>) AND c <= ...(<to ms>)
     $__fromTime, $__toTime           toDateTime(<s>)
     $__fromTime_ms, $__toTime_ms     fromUnixTimestamp64Milli(<ms>)
     $__dateFilter(c)    c >= toDate('YYYY-MM-DD') AND c <= toDate('YYYY-MM-DD')
     $__dateTimeFilter(d, t), $__dt(d, t)   (date filter on d) AND (time filter on t)
     $__timeInterval(c)  toStartOfInterval(toDateTime(c), INTERVAL <max(s, 1)> second)
     $__timeInterval_ms(c) toStartOfInterval(toDateTime64(c, 3), INTERVAL <max(ms,1)> millisecond)
     $__interval_s       <max(interval seconds, 1)>
   Seconds are Go's ``time.Unix()`` (truncated), intervals ``int(max(seconds, 1))``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["ALL", "QueryContext", "Variable", "interpolate"]

ALL = "$__all"
"""The value Grafana keeps for a variable set to All."""


@dataclass(frozen=True)
class Variable:
    """A dashboard variable as templateSrv holds it."""

    name: str
    current: str | list[str]
    options: list[str] = field(default_factory=list)
    all_value: str | None = None

    def is_all(self) -> bool:
        value = self.current
        return value == ALL or (isinstance(value, list) and value == [ALL])


@dataclass(frozen=True)
class QueryContext:
    """What the backend gets with a query: the time range and the interval."""

    time_from: datetime
    time_to: datetime
    interval_seconds: float = 60.0


# -- 1. $__conditionalAll (frontend) ----------------------------------------------------

_CONDITIONAL_ALL = "$__conditionalAll("
_VAR_IN_ARG = re.compile(r"(?<=\$\{)\w+(?=\})|(?<=\$)\w+")


def _macro_args(text: str, open_index: int) -> list[str]:
    """getMacroArgs: arguments of the bracket opening at ``open_index``."""
    args: list[str] = []
    depth = 0
    start = open_index + 1
    for i in range(open_index, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
            continue
        if ch in "()" and depth == 0:
            args.append(text[start:i])
            return args
    return []


def apply_conditional_all(sql: str, variables: Mapping[str, Variable]) -> str:
    index = sql.rfind(_CONDITIONAL_ALL)
    while index != -1:
        params = _macro_args(sql, index + len(_CONDITIONAL_ALL) - 1)
        if len(params) != 2:
            return sql
        phrase = params[0]
        found = _VAR_IN_ARG.search(params[1].strip())
        if found:
            variable = variables.get(found.group(0))
            if variable is not None:
                current = variable.current
                text = ",".join(current) if isinstance(current, list) else str(current)
                if text in ("", ALL):
                    phrase = "1=1"
        sql = sql.replace(f"{_CONDITIONAL_ALL}{params[0]},{params[1]})", phrase, 1)
        index = sql.rfind(_CONDITIONAL_ALL)
    return sql


# -- 2. templateSrv.replace with the plugin's format ------------------------------------

_GRAFANA_VARIABLE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}"
)


def _plugin_format(value: str | list[str]) -> str:
    if isinstance(value, list):
        return "'" + "','".join(value) + "'"
    return value


def replace_variables(sql: str, variables: Mapping[str, Variable]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        variable = variables.get(name)
        if variable is None:
            return match.group(0)
        if match.group(3) or match.group(6):
            raise NotImplementedError(f"explicit variable formats are not modelled: {name}")
        if variable.is_all():
            value: str | list[str] = (
                variable.all_value if variable.all_value is not None else list(variable.options)
            )
        else:
            value = variable.current
        return _plugin_format(value)

    return _GRAFANA_VARIABLE.sub(one, sql)


# -- 3. backend macros ------------------------------------------------------------------


def _seconds(t: datetime) -> int:
    return int(t.timestamp() // 1)


def _millis(t: datetime) -> int:
    return int(t.timestamp() * 1000 // 1)


def _one_arg(name: str, args: Sequence[str]) -> str:
    if len(args) != 1:
        raise ValueError(f"$__{name}: expected 1 argument, received {len(args)}")
    return args[0]


def _time_filter(q: QueryContext, args: Sequence[str]) -> str:
    c = _one_arg("timeFilter", args)
    return (
        f"{c} >= toDateTime({_seconds(q.time_from)}) AND {c} <= toDateTime({_seconds(q.time_to)})"
    )


def _time_filter_ms(q: QueryContext, args: Sequence[str]) -> str:
    c = _one_arg("timeFilter_ms", args)
    return (
        f"{c} >= fromUnixTimestamp64Milli({_millis(q.time_from)}) "
        f"AND {c} <= fromUnixTimestamp64Milli({_millis(q.time_to)})"
    )


def _date(t: datetime) -> str:
    return f"toDate('{t.astimezone(UTC).strftime('%Y-%m-%d')}')"


def _date_filter(q: QueryContext, args: Sequence[str]) -> str:
    c = _one_arg("dateFilter", args)
    return f"{c} >= {_date(q.time_from)} AND {c} <= {_date(q.time_to)}"


def _date_time_filter(q: QueryContext, args: Sequence[str]) -> str:
    if len(args) != 2:
        raise ValueError(f"$__dateTimeFilter: expected 2 arguments, received {len(args)}")
    d, t = args
    return (
        f"({d} >= {_date(q.time_from)} AND {d} <= {_date(q.time_to)}) AND "
        f"({t} >= toDateTime({_seconds(q.time_from)}) AND {t} <= toDateTime({_seconds(q.time_to)}))"
    )


def _time_interval(q: QueryContext, args: Sequence[str]) -> str:
    c = _one_arg("timeInterval", args)
    return f"toStartOfInterval(toDateTime({c}), INTERVAL {int(max(q.interval_seconds, 1))} second)"


def _time_interval_ms(q: QueryContext, args: Sequence[str]) -> str:
    c = _one_arg("timeInterval_ms", args)
    ms = int(max(int(q.interval_seconds * 1000), 1))
    return f"toStartOfInterval(toDateTime64({c}, 3), INTERVAL {ms} millisecond)"


MACROS: dict[str, Callable[[QueryContext, Sequence[str]], str]] = {
    "fromTime": lambda q, _: f"toDateTime({_seconds(q.time_from)})",
    "toTime": lambda q, _: f"toDateTime({_seconds(q.time_to)})",
    "fromTime_ms": lambda q, _: f"fromUnixTimestamp64Milli({_millis(q.time_from)})",
    "toTime_ms": lambda q, _: f"fromUnixTimestamp64Milli({_millis(q.time_to)})",
    "timeFilter": _time_filter,
    "timeFilter_ms": _time_filter_ms,
    "dateFilter": _date_filter,
    "dateTimeFilter": _date_time_filter,
    "dt": _date_time_filter,
    "timeInterval": _time_interval,
    "timeInterval_ms": _time_interval_ms,
    "interval_s": lambda q, _: str(int(max(q.interval_seconds, 1))),
}
"""pkg/macros/macros.go ``Macros``; sqlutil's defaults (timeFrom, timeGroup, table...) are
left out on purpose: :func:`interpolate` refuses SQL that would need them."""


def _parse_args(text: str) -> tuple[list[str], int]:
    """parseArgs: the bracketed list right at the start of ``text`` and its length."""
    if not text.startswith("("):
        return [], 0
    args: list[str] = []
    depth = 0
    current: list[str] = []
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    raise ValueError("failed to parse macro arguments (missing close bracket?)")


def expand_macros(sql: str, query: QueryContext) -> str:
    for name in sorted(MACROS, key=len, reverse=True):
        pattern = re.compile(rf"\$__{name}\b")
        matches = []
        for found in pattern.finditer(sql):
            args, length = _parse_args(sql[found.end() :])
            matches.append((sql[found.start() : found.end() + length], args))
        for full, args in matches:
            sql = sql.replace(full, MACROS[name](query, args))
    return sql


def interpolate(sql: str, variables: Mapping[str, Variable], query: QueryContext) -> str:
    """The SQL ClickHouse receives for a panel's ``rawSql``."""
    sql = apply_conditional_all(sql, variables)
    sql = replace_variables(sql, variables)
    sql = expand_macros(sql, query)
    left = re.search(r"\$\w+|\$\{[^}]*\}|\[\[\w+\]\]", sql)
    if left:
        raise ValueError(f"not expanded: {left.group(0)} in {sql}")
    return sql
