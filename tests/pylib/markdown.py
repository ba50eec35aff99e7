"""The project's Markdown as the tests read it: fenced blocks by language,
sections by heading, the shell commands of a block, the relative links of a
page and the anchors GitHub gives its headings. Used by the tests that
check the documentation against the service (test_readme.py,
test_schedules.py, test_configuration.py), so no test file imports
another."""

import os
import re
import shlex

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "..", ".."))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def pages():
    """README.md and every docs/*.md, README first, the rest by name."""
    docs = sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md"))
    return [README] + docs


def rel(path):
    """path as the repository names it (README.md, docs/api.md)."""
    return os.path.relpath(path, ROOT)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def fenced_blocks(text, lang, first_line=1):
    """(line number, body) of every fenced block of text in lang; the number
    is that of the opening fence, counting text's first line as first_line."""
    for m in re.finditer(r"^```" + re.escape(lang) + r"\n(.*?)^```$", text, re.S | re.M):
        yield first_line + text.count("\n", 0, m.start()), m.group(1)


def blocks(path, lang):
    """(line number, body) of every fenced block of the file path in lang."""
    yield from fenced_blocks(read(path), lang)


def prose_lines(text):
    """(line number, line) of text outside fenced blocks."""
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield n, line


def headings(text):
    """(line number, level, title) of every heading outside fenced blocks."""
    for n, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            yield n, len(m.group(1)), m.group(2)


def section(path, title, subsections=True):
    """(first line, text) of the section of the file path whose heading
    starts with title: from the line after its heading to the next heading
    of the same level or above (or the end of the file); without
    subsections, to the next heading of any level."""
    text = read(path)
    lines = text.splitlines(keepends=True)
    heads = list(headings(text))
    for i, (n, level, t) in enumerate(heads):
        if t.startswith(title):
            end = next((m for m, lv, _ in heads[i + 1:]
                        if lv <= level or not subsections), len(lines) + 1)
            return n + 1, "".join(lines[n:end - 1])
    raise AssertionError(f"{rel(path)} has no section '{title}'")


def shell_commands(block):
    """The commands of a shell block as word lists: lines joined where a
    backslash or an open quote continues them; comments dropped."""
    pending = ""
    for text in block.splitlines():
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        pending += text + "\n"
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
        if words:
            yield words
    assert not pending.strip(), f"unfinished command: {pending!r}"


def plain(title):
    """A heading's text as GitHub renders it: code spans keep their text,
    links their label, emphasis marks go."""
    title = CODE_SPAN.sub(lambda m: m.group(2), title)
    title = LINK.sub(lambda m: m.group(1), title)
    return re.sub(r"(\*\*|__|\*)", "", title)


def anchor(title):
    """GitHub's anchor of a heading (before its -1, -2 of repeats): lower
    case, every character but letters, digits, '_', '-' and spaces
    dropped, each space a '-'."""
    text = plain(title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor of the file path's headings, repeats numbered as
    GitHub numbers them (x, x-1, x-2)."""
    seen, out = {}, set()
    for _, _, title in headings(read(path)):
        a = anchor(title)
        if a in seen:
            seen[a] += 1
            out.add(f"{a}-{seen[a]}")
        else:
            seen[a] = 0
            out.add(a)
    return out


def links(path):
    """(line number, target) of every link and image of the file path
    outside code (fenced blocks and code spans); a label may run over
    lines."""
    text = read(path)
    keep = dict(prose_lines(text))
    prose = "\n".join(keep.get(n, "") for n in range(1, text.count("\n") + 2))
    prose = CODE_SPAN.sub(lambda m: "code" + "\n" * m.group(0).count("\n"), prose)
    for m in LINK.finditer(prose):
        yield prose.count("\n", 0, m.start()) + 1, m.group(2)
