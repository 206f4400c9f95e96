#!/usr/bin/env python3
"""The published results' tables come from the databases published beside them.

docs/results.md: every table is preceded by a marker naming the database it comes from and how
it is checked:

    <!-- mxablate table docs/data/NAME.db.xz rows -->
        every row of the table below is a row of `mxablate table` on that database, verbatim;
    <!-- mxablate table docs/data/NAME.db.xz --baseline FDW rows -->
        the same, for the tool run with those options (`--baseline ARM`: against another arm);
    <!-- mxablate table docs/data/NAME.db.xz final-loss-by train.lr -->
        a grid of final validation losses: row = arm, column = the axis' value; each cell is the
        final val loss of the tool's row "arm [train.lr=VALUE]".

docs/results-scale-study.md (the superseded study): every row of every per-model table (arm,
extra tokens, the interval with its kind, the sign-flip p, final validation loss) and every model
block's target and parameter count appear in the tool's output for that model.

A number edited by hand in a document, or a database replaced without its document, fails here.

    published_results_test.py REPO_ROOT MXABLATE_BINARY
"""
import lzma
import re
import subprocess
import sys
import tempfile
from pathlib import Path

repo, binary = Path(sys.argv[1]), sys.argv[2]
failures = []
checked = 0


def table_of(db_xz, options=()):
    """`mxablate table`'s Markdown output for a published database, or None (a failure noted)."""
    path = repo / db_xz
    if not path.is_file():
        failures.append(f"{db_xz}: no such published database")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "study.db"
        db.write_bytes(lzma.decompress(path.read_bytes()))
        out = subprocess.run([binary, "table", "--db", str(db), *options], capture_output=True, text=True)
    if out.returncode != 0:
        failures.append(f"{db_xz}: mxablate table failed ({out.returncode}): {out.stderr.strip()}")
        return None
    return out.stdout


def table_lines(text, start):
    """The '| …' lines of the first table at or after `start`, the header and rule left out."""
    lines = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    return lines[2:]


def check_rows(db_xz, lines, tool):
    global checked
    tool_lines = set(tool.splitlines())
    if not lines:
        failures.append(f"{db_xz}: a marked table with no rows")
    for line in lines:
        checked += 1
        if line not in tool_lines:
            failures.append(f"{db_xz}: row not in the tool's table: {line}")


def check_grid(db_xz, axis, lines, header, tool):
    global checked
    values = [c.strip() for c in header.strip("|").split("|")][1:]
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        arm, losses = cells[0], cells[1:]
        if len(losses) != len(values):
            failures.append(f"{db_xz}: row {arm} has {len(losses)} cells for {len(values)} columns")
            continue
        for value, loss in zip(values, losses):
            checked += 1
            label = re.escape(f"{arm} \\[{axis}={value}\\]")
            row = re.search(rf"^\| {label} \|(.*)$", tool, flags=re.M)
            # The tool's columns: … | n | final val loss | seeds | …: the final loss is the 10th.
            if not row or row.group(1).split("|")[8].strip() != loss:
                failures.append(f"{db_xz}: {arm} at {axis}={value}: {loss} is not the tool's "
                                f"({row.group(1).split('|')[8].strip() if row else 'no row'})")


results = (repo / "docs/results.md").read_text(encoding="utf-8")
markers = list(re.finditer(
    r"<!-- mxablate table (\S+)((?: --[a-z-]+ [^ -]\S*)*) (rows|final-loss-by (\S+)) -->", results))
if len(markers) < 2:
    failures.append(f"docs/results.md: {len(markers)} marked tables, expected the study's tables")
outputs = {}
for m in markers:
    db_xz, options = m.group(1), tuple(m.group(2).split())
    if (db_xz, options) not in outputs:
        outputs[(db_xz, options)] = table_of(db_xz, options)
    tool = outputs[(db_xz, options)]
    if tool is None:
        continue
    lines = table_lines(results, m.end())
    if m.group(3) == "rows":
        check_rows(db_xz, lines, tool)
    else:
        header = next(l for l in results[m.end():].splitlines()[1:] if l.startswith("|"))
        check_grid(db_xz, m.group(4), lines, header, tool)


def blocks(text, heading):
    """{model: block text} for each '<heading> llama-…' section."""
    parts = re.split(rf"^{heading}(llama-\S+)", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


scale = table_of("docs/data/scale-study.db.xz")
if scale is not None:
    tool = blocks(scale, r"## model ")
    doc = blocks((repo / "docs/results-scale-study.md").read_text(encoding="utf-8"), r"\*\*")
    if set(doc) != {"llama-20m", "llama-125m", "llama-350m"}:
        failures.append(f"results-scale-study.md's model blocks: {sorted(doc)}")
    for model, text in doc.items():
        if model not in tool:
            failures.append(f"{model}: no block in `mxablate table`'s output")
            continue
        params = re.search(r"\(([\d.]+ M) parameters", text)
        if not params or f"({params.group(1)} parameters)" not in tool[model]:
            failures.append(f"{model}: parameter count {params and params.group(1)} not in the tool's block")
        target = re.search(r"target val loss ([\d.]+)", text)
        if not target or f"target val loss {target.group(1)}" not in tool[model]:
            failures.append(f"{model}: target {target and target.group(1)} not the tool's")
        # arm | interventions | extra tokens | interval (its kind) | p | final val loss | paper;
        # the tool has n (the seeds compared) between p and the final loss.
        rows = re.findall(r"^\| (\S+) \| [^|]* \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([\d.]+) \|", text,
                          flags=re.M)
        if len(rows) != 7:
            failures.append(f"{model}: {len(rows)} arm rows in results-scale-study.md, expected 7")
        for arm, extra, interval, p, final in rows:
            checked += 1
            cells = [c.strip() for c in (extra, interval, p)]
            pattern = (rf"^\| {re.escape(arm)} \|.*\| " + r" \| ".join(map(re.escape, cells)) +
                       rf" \| [-\d]+ \| {re.escape(final)} \|")
            if not re.search(pattern, tool[model], flags=re.M):
                failures.append(f"{model} {arm}: '{' | '.join(cells)}', {final} not in the tool's table")

for f in failures:
    print("FAILED:", f, file=sys.stderr)
print(f"checked {checked} published table rows and cells against `mxablate table`")
sys.exit(1 if failures else 0)
