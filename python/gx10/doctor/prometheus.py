"""A strict parser of the Prometheus text exposition format (version 0.0.4).

What vLLM's `/metrics` serves (prometheus_client's `generate_latest`, content type
``text/plain; version=0.0.4``), read without a dependency: ``prometheus_client`` is not one of
ours. The format, as the Prometheus documentation ("Exposition formats", text-based format) and
its Go parser (expfmt's TextParser) define it:

- a line is a sample, a ``# HELP name text``, a ``# TYPE name type``, another ``#`` comment, or
  blank; tokens are separated by blanks and tabs;
- a sample is ``name[{label="value",...}] value [timestamp]``: names match
  ``[a-zA-Z_:][a-zA-Z0-9_:]*``, label names ``[a-zA-Z_][a-zA-Z0-9_]*``, label values are quoted
  with ``\\\\``, ``\\"`` and ``\\n`` the only escapes, values are Go floats (``NaN``, ``+Inf``,
  ``-Inf`` included), the timestamp is an int64 of milliseconds;
- TYPE is one of counter, gauge, histogram, summary, untyped, at most once per name and before
  the name's first sample; HELP at most once per name;
- a family's lines form one group; a histogram ``h`` owns ``h_bucket`` (with ``le``), ``h_sum``
  and ``h_count``, a summary ``s`` owns ``s`` (with ``quantile``), ``s_sum`` and ``s_count``.

Strict: a line that breaks any of these, a label repeated in one sample, the same series twice,
or a negative counter raises `PrometheusParseError` naming the line; nothing is guessed. (A
counter's samples carry the name its TYPE line gives: prometheus_client writes
``# TYPE vllm:x_total counter`` and ``vllm:x_total{...}``, and its ``vllm:x_created`` series as a
gauge family of their own.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

TYPES = ("counter", "gauge", "histogram", "summary", "untyped")

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Go's strconv.ParseFloat as the text format uses it: decimal (exponent optional), Inf, NaN.
_FLOAT = re.compile(
    r"[+-]?(?:inf|infinity|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)", re.IGNORECASE
)
_TIMESTAMP = re.compile(r"-?[0-9]+")
_BLANKS = re.compile(r"[ \t]+")
_INT64 = 2**63
_SHOWN = 120  # characters of an offending line quoted in an error
_KEYWORD = re.compile(r"(HELP|TYPE)(?=[ \t]|$)")


class PrometheusParseError(ValueError):
    """The text is not valid Prometheus text exposition; says which line and why."""

    def __init__(self, lineno: int, line: str, why: str) -> None:
        shown = line if len(line) <= _SHOWN else line[:_SHOWN] + "..."
        super().__init__(f"line {lineno}: {why}: {shown!r}")
        self.lineno = lineno
        self.why = why


_Fail = Callable[[str], PrometheusParseError]  # makes the error for the line being read


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    type: str  # one of TYPES; "untyped" when no TYPE line named it
    help: str | None
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class Exposition:
    """The families of one scrape, in the order the text gave them."""

    families: Mapping[str, MetricFamily] = field(default_factory=dict)

    def family(self, name: str) -> MetricFamily | None:
        return self.families.get(name)

    def __iter__(self) -> Iterator[MetricFamily]:
        return iter(self.families.values())


def parse(text: str) -> Exposition:
    """Every family of `text`; PrometheusParseError on the first line that breaks the format."""
    builder = _Builder()
    for lineno, line in enumerate(text.split("\n"), start=1):
        stripped = line.lstrip(" \t")
        if not stripped:
            continue
        if stripped.startswith("#"):
            builder.comment(lineno, line, stripped[1:])
        else:
            builder.sample(lineno, line, _sample(lineno, line))
    return builder.build()


# --- one line --------------------------------------------------------------------------------


def _skip_blanks(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _sample(lineno: int, line: str) -> Sample:
    def fail(why: str) -> PrometheusParseError:
        return PrometheusParseError(lineno, line, why)

    pos = _skip_blanks(line, 0)
    match = _NAME.match(line, pos)
    if match is None:
        raise fail("expected a metric name")
    name, pos = match.group(), match.end()
    labels: dict[str, str] = {}
    after = _skip_blanks(line, pos)
    if after < len(line) and line[after] == "{":
        pos = _labels(line, after + 1, labels, fail)
    rest = line[pos:]
    if not rest or rest[0] not in " \t":
        raise fail("expected a blank and the value after the metric name and labels")
    tokens = _BLANKS.split(rest.strip(" \t"))
    if len(tokens) > 2:
        raise fail("expected only a value and an optional timestamp after the labels")
    value = _float(tokens[0], fail)
    timestamp = None
    if len(tokens) == 2:
        if not _TIMESTAMP.fullmatch(tokens[1]):
            raise fail(f"timestamp {tokens[1]!r} is not an integer of milliseconds")
        timestamp = int(tokens[1])
        if not -_INT64 <= timestamp < _INT64:
            raise fail(f"timestamp {tokens[1]} is out of the int64 range")
    return Sample(name, labels, value, timestamp)


def _labels(line: str, pos: int, labels: dict[str, str], fail: _Fail) -> int:
    """Read `name="value", ...}` from `pos` (just after the brace); the position after `}`."""
    pos = _skip_blanks(line, pos)
    while True:
        if pos < len(line) and line[pos] == "}":
            return pos + 1
        match = _LABEL_NAME.match(line, pos)
        if match is None:
            raise fail("expected a label name or '}'")
        label = match.group()
        pos = _skip_blanks(line, match.end())
        if pos >= len(line) or line[pos] != "=":
            raise fail(f"expected '=' after the label name {label!r}")
        pos = _skip_blanks(line, pos + 1)
        if pos >= len(line) or line[pos] != '"':
            raise fail(f"expected a quoted value for the label {label!r}")
        value, pos = _quoted(line, pos + 1, fail)
        if label in labels:
            raise fail(f"label {label!r} given twice")
        labels[label] = value
        pos = _skip_blanks(line, pos)
        if pos < len(line) and line[pos] == ",":
            pos = _skip_blanks(line, pos + 1)
        elif pos >= len(line) or line[pos] != "}":
            raise fail(f"expected ',' or '}}' after the label {label!r}")


def _quoted(line: str, pos: int, fail: _Fail) -> tuple[str, int]:
    """A label value's text from `pos` (after its opening quote); the position after its close."""
    out: list[str] = []
    while pos < len(line):
        char = line[pos]
        if char == '"':
            return "".join(out), pos + 1
        if char == "\\":
            escaped = line[pos + 1 : pos + 2]
            if escaped not in ("\\", '"', "n"):
                raise fail(f"invalid escape sequence '\\{escaped}' in a label value")
            out.append("\n" if escaped == "n" else escaped)
            pos += 2
            continue
        out.append(char)
        pos += 1
    raise fail("unterminated label value (no closing quote)")


def _float(token: str, fail: _Fail) -> float:
    if not _FLOAT.fullmatch(token):
        raise fail(f"value {token!r} is not a number")
    return float(token)


def _help_text(text: str, fail: _Fail) -> str:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            escaped = text[pos + 1 : pos + 2]
            if escaped not in ("\\", "n"):
                raise fail(f"invalid escape sequence '\\{escaped}' in a HELP text")
            out.append("\n" if escaped == "n" else "\\")
            pos += 2
            continue
        out.append(char)
        pos += 1
    return "".join(out)


# --- families --------------------------------------------------------------------------------


@dataclass
class _Family:
    name: str
    type: str | None = None
    help: str | None = None
    samples: list[Sample] = field(default_factory=list)


class _Builder:
    """Groups lines into families and checks what spans lines (grouping, TYPE, duplicates)."""

    def __init__(self) -> None:
        self.families: dict[str, _Family] = {}
        self.current: str | None = None
        self.series: set[tuple[str, frozenset[tuple[str, str]]]] = set()

    def _enter(self, name: str, lineno: int, line: str) -> _Family:
        """The family a line belongs to; its lines must not be split by another family's."""
        if name != self.current:
            if name in self.families:
                raise PrometheusParseError(
                    lineno, line, f"the lines of {name} are not one group (another family between)"
                )
            self.families[name] = _Family(name)
            self.current = name
        return self.families[name]

    def comment(self, lineno: int, line: str, body: str) -> None:
        def fail(why: str) -> PrometheusParseError:
            return PrometheusParseError(lineno, line, why)

        text = body.lstrip(" \t")
        found = _KEYWORD.match(text)
        if found is None:
            return  # an ordinary comment
        keyword, rest = found.group(1), text[found.end() :].lstrip(" \t")
        match = _NAME.match(rest)
        if match is None:
            raise fail(f"{keyword} needs a metric name")
        name, tail = match.group(), rest[match.end() :]
        if tail and tail[0] not in " \t":
            raise fail(f"{keyword}: {rest.split()[0]!r} is not a metric name")
        family = self._enter(name, lineno, line)
        if keyword == "HELP":
            if family.help is not None:
                raise fail(f"a second HELP line for {name}")
            family.help = _help_text(tail.lstrip(" \t"), fail)
            return
        kind = tail.strip(" \t")
        if kind not in TYPES:
            raise fail(f"TYPE of {name} is {kind!r}, not one of {', '.join(TYPES)}")
        if family.type is not None:
            raise fail(f"a second TYPE line for {name}")
        if family.samples:
            raise fail(f"the TYPE of {name} comes after its samples")
        family.type = kind

    def _owner(self, name: str) -> str:
        """The family a sample name belongs to (a histogram's _bucket, a summary's _sum, ...)."""
        known = self.families.get(name)
        if known is not None and known.type is not None:
            return name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name.removesuffix(suffix)
            if base == name or base not in self.families:
                continue
            kind = self.families[base].type
            if kind == "histogram" or (kind == "summary" and suffix != "_bucket"):
                return base
        return name

    def sample(self, lineno: int, line: str, sample: Sample) -> None:
        def fail(why: str) -> PrometheusParseError:
            return PrometheusParseError(lineno, line, why)

        family = self._enter(self._owner(sample.name), lineno, line)
        kind = family.type or "untyped"
        if kind == "histogram":
            if sample.name == family.name:
                raise fail(f"histogram {family.name} has no bare sample (_bucket, _sum, _count)")
            if sample.name.endswith("_bucket"):
                le = sample.labels.get("le")
                if le is None or not _FLOAT.fullmatch(le):
                    raise fail(f"bucket of histogram {family.name} without a numeric 'le' label")
        elif kind == "summary" and sample.name == family.name:
            quantile = sample.labels.get("quantile")
            if quantile is None or not _FLOAT.fullmatch(quantile):
                raise fail(f"sample of summary {family.name} without a numeric 'quantile' label")
        elif kind == "counter" and sample.value < 0:
            raise fail(f"counter {family.name} is negative")
        key = (sample.name, frozenset(sample.labels.items()))
        if key in self.series:
            raise fail(f"series {sample.name}{dict(sample.labels)} given twice")
        self.series.add(key)
        family.samples.append(sample)

    def build(self) -> Exposition:
        return Exposition(
            {
                name: MetricFamily(name, f.type or "untyped", f.help, tuple(f.samples))
                for name, f in self.families.items()
            }
        )


def total(family: MetricFamily, **labels: str) -> float:
    """The sum of a family's samples named like it whose labels include `labels` (NaN skipped)."""
    return math.fsum(
        s.value
        for s in family.samples
        if s.name == family.name
        and not math.isnan(s.value)
        and all(s.labels.get(k) == v for k, v in labels.items())
    )
