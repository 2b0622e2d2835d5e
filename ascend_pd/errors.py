"""The one error type for bad user input: it names the file, the field, the line and the fix."""

from __future__ import annotations


class InputError(Exception):
    """A file or flag the user gave cannot be used. The CLI prints it and exits 2, without a traceback."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 line: int | None = None, fix: str | None = None):
        self.message = message
        self.file = file
        self.field = field
        self.line = line
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        where = self.file or ""
        if self.line is not None:
            where += f":{self.line}"
        parts = []
        if where:
            parts.append(where)
        if self.field:
            parts.append(f"field '{self.field}'")
        head = ": ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text
