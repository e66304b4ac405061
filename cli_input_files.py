"""Input files read strictly: a file that is missing, unreadable, not UTF-8 or not YAML is an
InputFileError naming the file and the reason (with the line for YAML), never a traceback and never
a silent partial read. The commands turn it into a one-line message and cli_exit_codes.EXIT_INPUT.
"""

from __future__ import annotations

from pathlib import Path

import yaml

# libyaml when the wheel has it: checking a large cluster file costs a fraction of loading it.
_YamlLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InputFileError(Exception):
    """An input file that cannot be used; str() is "<path>: <reason>"."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def read_text_file(path: Path) -> str:
    """The file's text as UTF-8, or InputFileError (missing, a directory, no permission, not UTF-8)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputFileError(str(path), "no such file") from None
    except IsADirectoryError:
        raise InputFileError(str(path), "is a directory, not a file") from None
    except OSError as error:
        raise InputFileError(str(path), f"cannot read: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputFileError(str(path), f"not UTF-8 text ({error.reason} at byte {error.start})") from None


def check_yaml_stream(text: str, source: str) -> None:
    """InputFileError when text is not one or more YAML documents; says where parsing stopped.

    Only composes the node tree (no objects are built), so the objects are still loaded once, by
    whatever reads them next.
    """
    try:
        for _ in yaml.compose_all(text, Loader=_YamlLoader):
            pass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = error.problem or error.context or "cannot parse"
        raise InputFileError(source, f"not YAML{where}: {problem}") from None
    except yaml.reader.ReaderError as error:
        # A character YAML forbids (a control character); its message spans lines, ours does not.
        line = text.count("\n", 0, error.position) + 1
        reason = f"not YAML at line {line}: character #x{error.character:02x} is not allowed"
        raise InputFileError(source, reason) from None
    except yaml.YAMLError as error:
        raise InputFileError(source, f"not YAML: {' '.join(str(error).split())}") from None


def read_yaml_file(path: Path) -> str:
    """The text of a YAML (or JSON) file, checked to parse; InputFileError otherwise."""
    text = read_text_file(path)
    check_yaml_stream(text, str(path))
    return text
