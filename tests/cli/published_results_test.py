#!/usr/bin/env python3
"""docs/results.md's tables come from the database published beside them.

Decompresses docs/data/scale-study.db.xz, runs `mxablate table` on it, and checks that every row
of every per-model table in docs/results.md (arm, extra tokens with its interval, final
validation loss) and every model block's target and parameter count appear in the tool's
output for that model. A number edited by hand in the document, or a database replaced without
the document, fails here.

    published_results_test.py REPO_ROOT MXABLATE_BINARY
"""
import lzma
import re
import subprocess
import sys
import tempfile
from pathlib import Path

repo, binary = Path(sys.argv[1]), sys.argv[2]
results = (repo / "docs/results.md").read_text(encoding="utf-8")
with tempfile.TemporaryDirectory() as tmp:
    db = Path(tmp) / "study.db"
    db.write_bytes(lzma.decompress((repo / "docs/data/scale-study.db.xz").read_bytes()))
    out = subprocess.run([binary, "table", "--db", str(db)], capture_output=True, text=True)
if out.returncode != 0:
    sys.exit(f"mxablate table failed ({out.returncode}): {out.stderr.strip()}")


def blocks(text, heading):
    """{model: block text} for each '<heading> llama-…' section."""
    parts = re.split(rf"^{heading}(llama-\S+)", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


tool = blocks(out.stdout, r"## model ")
doc = blocks(results, r"\*\*")
failures = []
if set(doc) != {"llama-20m", "llama-125m", "llama-350m"}:
    failures.append(f"results.md's model blocks: {sorted(doc)}")
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
    rows = re.findall(r"^\| (\S+) \| [^|]* \| ([^|]+) \| ([\d.]+) \|", text, flags=re.M)
    if len(rows) != 7:
        failures.append(f"{model}: {len(rows)} arm rows in results.md, expected 7")
    for arm, extra, final in rows:
        pattern = rf"^\| {re.escape(arm)} \|.*\| {re.escape(extra.strip())} \| {re.escape(final)} \|"
        if not re.search(pattern, tool[model], flags=re.M):
            failures.append(f"{model} {arm}: '{extra.strip()}', {final} not in the tool's table")
for f in failures:
    print("FAILED:", f, file=sys.stderr)
print(f"checked {sum(len(re.findall(r'^[|] ', t, flags=re.M)) for t in doc.values())} table lines "
      f"of {len(doc)} models against `mxablate table`")
sys.exit(1 if failures else 0)
