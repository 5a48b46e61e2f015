"""CI gates on eval metrics (`--min-recall`, `--min-ndcg`, `--min-faithfulness`, `--min-refusal`): one shortfall
per metric below the minimum asked for, worded in one line."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["Shortfall", "shortfall"]


class Shortfall(BaseModel):
    """A metric below the minimum asked for."""

    metric: str
    option: str  # the command-line option that set the minimum
    value: float | None  # None: it could not be measured
    minimum: float
    scope: str = ""  # what was measured, e.g. "in mode vector", "with model litellm/x"
    lacking: str = "answerable queries"  # what measuring it needs (said when it could not be measured)

    @property
    def message(self) -> str:
        """One line, e.g. `recall@5 0.62 is below --min-recall 0.80 in mode vector`."""
        suffix = f" {self.scope}" if self.scope else ""
        if self.value is None:
            return f"{self.metric} cannot be measured without {self.lacking}, {self.option} {self.minimum}{suffix}"
        value, minimum = _distinct(self.value, self.minimum)
        return f"{self.metric} {value} is below {self.option} {minimum}{suffix}"


def shortfall(
    metric: str, option: str, value: float | None, minimum: float | None, *, scope: str = "", lacking: str = ""
) -> Shortfall | None:
    """The shortfall of `value` against `minimum` (None when no minimum was asked or it is met; a value that
    could not be measured falls short)."""
    if minimum is None or (value is not None and value >= minimum):
        return None
    extra = {"lacking": lacking} if lacking else {}
    return Shortfall(metric=metric, option=option, value=value, minimum=minimum, scope=scope, **extra)


def _distinct(value: float, minimum: float) -> tuple[str, str]:
    """Both numbers with two decimals, or as many more as it takes to tell them apart."""
    for digits in range(2, 7):
        a, b = f"{value:.{digits}f}", f"{minimum:.{digits}f}"
        if a != b:
            return a, b
    return repr(value), repr(minimum)
