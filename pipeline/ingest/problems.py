"""Problems of single lines, counted per file and kind instead of listed one by one."""

from __future__ import annotations


class LineProblems:
    """Problems of single lines, summarised per file and kind: a count and the first few line numbers
    (a 300 MB log can have thousands of the same wrapped-line notice)."""

    SHOWN = 5

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list] = {}

    def add(self, file: str, line_no: int, message: str) -> None:
        """Count one line's problem; its kind is the message up to its first colon."""
        kind = message.split(":", 1)[0]
        entry = self._seen.setdefault((file, kind), [0, [], message])
        entry[0] += 1
        if len(entry[1]) < self.SHOWN:
            entry[1].append(line_no)

    def summary(self) -> list[str]:
        """One line per file and kind: `file:first_line: message` alone, or the kind with its count and lines."""
        out = []
        for (file, kind), (count, lines, first_message) in self._seen.items():
            if count == 1:
                out.append(f"{file}:{lines[0]}: {first_message}")
            else:
                more = ", ..." if count > len(lines) else ""
                out.append(f"{file}: {kind}: {count} lines (at lines {', '.join(map(str, lines))}{more})")
        return out
