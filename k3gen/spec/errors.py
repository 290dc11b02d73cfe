"""Errors a spec author or a caller sees. Spec errors are collected as values and reported together."""

from __future__ import annotations

from dataclasses import dataclass

from k3gen.spec.escape import visible


@dataclass(frozen=True, order=True)
class SpecError:
    """One problem in one spec, located at `file:line` and a dotted field path."""

    file: str  # path as given on the command line, relative to the project: specs/x.yaml
    line: int
    kernel: str  # "" when the kernel name itself could not be read
    field: str  # dotted path inside the spec, e.g. dtypes.axes.score.1
    message: str  # what is wrong and what to write instead

    def __str__(self) -> str:
        where = f'kernel "{self.kernel}", {self.field}' if self.kernel else self.field
        return visible(f"{self.file}:{self.line} ({where}): {self.message}")


class SpecErrors(Exception):
    """Raised once per run with every SpecError found, sorted by file and line."""

    def __init__(self, errors: list[SpecError]):
        self.errors = sorted(set(errors))
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.errors)
        head = f"{n} spec error{'s' if n != 1 else ''}:"
        return "\n".join([head, *(f"  {e}" for e in self.errors)])


class FieldError(ValueError):
    """Raised inside pydantic validators to point below the field being validated.

    pydantic keeps the exception in the error's ctx, so the loader can extend the location
    with `subpath` and the line map can point at the exact YAML node. `also` carries further
    problems found by the same validator, (subpath, message) each, so all are reported at once.
    """

    def __init__(self, message: str, subpath: tuple = (), also: list[tuple[tuple, str]] = ()):
        super().__init__(message)
        self.subpath = tuple(subpath)
        self.also = list(also)

    @property
    def items(self) -> list[tuple[tuple, str]]:
        return [(self.subpath, str(self)), *self.also]

    @classmethod
    def collect(cls, problems: list[tuple[tuple, str]]) -> None:
        """Raise one FieldError carrying every (subpath, message), if there are any."""
        if problems:
            (first_path, first_msg), *rest = problems
            raise cls(first_msg, first_path, rest)


class UnknownFamilyError(ValueError):
    """A command named a family no spec declares (exit 2); the message lists the families."""

    def __init__(self, unknown: list[str], known: list[str]):
        self.unknown, self.known = unknown, known
        names = ", ".join(f"'{n}'" for n in unknown)
        super().__init__(
            f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {visible(names)}; "
            f"families: {', '.join(known) or 'none'}"
        )

    @classmethod
    def check(cls, names: list[str], known: list[str]) -> None:
        """Raise for the names that are not among `known`, if any."""
        if unknown := [n for n in names if n not in known]:
            raise cls(unknown, known)
