"""The metric names a PromQL expression reads: enough of PromQL's lexical rules to check that a
dashboard asks only for series that exist, not a parser.

What is not a metric name is taken out first: string literals (label values, `label_values`'
arguments), label matchers (`{...}`), range and subquery brackets (`[5m]`, `[$__rate_interval]`),
the label lists of `by`, `without`, `on`, `ignoring`, `group_left` and `group_right`, and Grafana
variables (`$node`). What is left is identifiers: one followed by `(` is a function or an
aggregation, a keyword or operator word is neither, a number's exponent (`1e3`) or a duration's
unit (`offset 5m`) follows a digit; every other identifier is a metric name.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_VARIABLE = re.compile(r"\$\{?[A-Za-z0-9_]+\}?")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# Words PromQL reserves (binary set operators, modifiers, literals): never a metric name.
KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "atan2",
        "inf",
        "nan",
    }
)


class PromQLError(ValueError):
    """The expression's brackets or quotes do not pair up."""


def _balanced(expr: str) -> None:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for char in expr:
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            raise PromQLError(f"unbalanced {char!r} in {expr!r}")
    if stack:
        raise PromQLError(f"unclosed {stack[-1]!r} in {expr!r}")


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects (`up`, `vllm:prompt_tokens_total`, ...)."""
    text = _STRING.sub('""', expr)
    if any(quote in text.replace('""', "") for quote in "\"'`"):
        raise PromQLError(f"unterminated string in {expr!r}")
    _balanced(text)
    text = _MATCHERS.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _VARIABLE.sub(" ", text)
    names: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        before = text[match.start() - 1] if match.start() > 0 else " "
        if before.isalnum() or before in "._":
            continue  # 1e3, 5m, 0.5e-3: part of a number or a duration
        rest = text[match.end() :].lstrip()
        if rest.startswith("("):
            continue  # a function or an aggregation
        if match.group().lower() in KEYWORDS:
            continue
        names.add(match.group())
    return names
