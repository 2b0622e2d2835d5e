"""What a node name may hold: render writes it into shell comments, file names (launch-<node>.sh) and Kubernetes
label values, so the cluster loader and validate's APD305 rule refuse the same characters."""

from __future__ import annotations

import re

K8S_NAME_MAX = 63  # a label value, and the Service name (an RFC 1035 label)

# A Kubernetes label value: what kubernetes.io/hostname holds, so the node selectors render writes match.
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE_RULE = ("letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most "
                    f"{K8S_NAME_MAX} characters (a Kubernetes label value)")


def unsafe_character(value: str, pattern: re.Pattern[str]) -> str | None:
    """The first character of `value` that keeps it from matching `pattern` (a character class pattern), shown as
    Python writes it (a newline as '\\n'); None when `value` matches."""
    if pattern.fullmatch(value):
        return None
    for end in range(1, len(value) + 1):
        if not pattern.fullmatch(value[:end]) and not pattern.fullmatch(value[:end] + "a"):
            return repr(value[end - 1])
    return f"{value[-1]!r} at its end"


def node_name_problem(name: str) -> str | None:
    """Why `name` cannot name a node, or None when it can."""
    bad = unsafe_character(name, LABEL_VALUE)
    if bad is not None:
        return f"node name {name!r} has {bad}, which is not safe in a shell comment, a file name or a Kubernetes name"
    if len(name) > K8S_NAME_MAX:
        return f"node name '{name}' is {len(name)} characters; Kubernetes allows {K8S_NAME_MAX}"
    return None
