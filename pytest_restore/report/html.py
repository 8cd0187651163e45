"""``report.html``: the report in one self-contained page, every question's story one click away.

One file, nothing fetched: the style, the script, the figure (inline SVG) and
the data (the records' stories and the texts of the units they name, as JSON
in the page) are all in it, so it opens from a file, a CI artifact or an
e-mail attachment without a network. The page shows the findings, the figure
and both regimes' cell tables, then every record, filterable by policy,
budget, regime, bin and question type (and by question id or text); a record
opens its question's story as ``python -m pytest_restore show`` prints it:
the question, the reference, the gold and its fate in the cell, what each
condition's reader saw (gold, forced, ranked), the answers, the verdicts and
the bin; then every store of the question at the same budget side by side
(each policy's regime-(b) record: a memory system's held memories that cite
the gold and those its reader saw, with the turns each cites, a library's
version; a store of raw turns, its gold turns kept or evicted).

The page's state is in its address (``#policy=fifo&bin=irreversible&open=3``),
so a view can be linked to, and a browser test drives the page through it.
The stories come from :mod:`pytest_restore.report.story`, the same as the
terminal's; the page is a function of the records, ``summary.json`` and the
data file, so a rebuild writes it byte for byte.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_restore.data.dataset import Dataset
from pytest_restore.record import BINS, Record, ranker_of
from pytest_restore.report.inputs import record_order
from pytest_restore.report.story import Story, UnitText, cell_name, tell
from pytest_restore.stats.results import policy_order

#: The values of the page's bin filter besides the three bins.
NO_BIN = "no bin"
EXCLUDED = "excluded"


# -- the data the page carries ----------------------------------------------------------------

#: The fields of one record in the page's data, in order (strings as indices into the string table).
RECORD_FIELDS: tuple[str, ...] = (
    "q", "policy", "budget", "seed", "regime", "reader", "judge", "ranker", "cell", "bin", "outcome",
    "store_units", "store_tokens", "held", "gold", "conditions",
)
#: The fields of one held memory of a memory system's record (``held``; null for a store of raw turns), in
#: order: where it sits (the turns it cites, and their date), its text (strings as indices), whether it cites
#: the question's gold, and whether the policy condition's reader saw it.
HELD_FIELDS: tuple[str, ...] = ("where", "text", "gold", "seen")
#: The fields of one condition, in order: its name, what it is, the answer (strings as indices), the
#: verdict, the injected tokens, the positions the reader saw and those forced in (null: not recorded).
CONDITION_FIELDS: tuple[str, ...] = ("name", "about", "answer", "correct", "tokens", "seen", "forced")


class Strings:
    """The page's string table: each distinct string once (answers repeat across a question's cells)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int | None:
        if text is None:
            return None
        return self.index.setdefault(text, len(self.index))

    def table(self) -> list[str]:
        """The strings, by index."""
        return list(self.index)


#: The page's keys of derived memories start here (past any history's units).
DERIVED_KEYS = 10**9


def _unit_row(unit: UnitText, with_text: bool) -> list[Any]:
    row = [unit.session, unit.turn, unit.date, unit.role, unit.content if with_text else None]
    return row + [unit.label] if unit.label else row


def _bin_filter(record: Record) -> str:
    """The value the bin filter knows a record by."""
    return EXCLUDED if record.excluded else record.bin or NO_BIN


def held_memories(record: Record, s: Strings) -> list[list[Any]] | None:
    """What a memory system's record says it held for its question (:data:`HELD_FIELDS`): the memories citing
    the gold, then the others a condition's reader saw; ``None`` for a store of raw turns."""
    m = record.memories
    if m is None:
        return None
    injected = m.injected or (False,) * len(m.texts or ())
    out = [[s(where), s(text), True, bool(seen)] for where, text, seen in zip(m.where or (), m.texts or (), injected)]
    shown = set(record.conditions.policy.injected_positions or ())
    out += [
        [s(where), s(text), False, position in shown]
        for position, where, text in zip(m.others or (), m.others_where or (), m.others_texts or ())
    ]
    return out


def _row(record: Record, q: int, outcome: str, gold: list[Any], conditions: list[Any], s: Strings) -> list[Any]:
    r = record
    return [
        q, s(r.policy), r.budget, r.seed, r.regime, s(r.reader), s(r.judge), s(ranker_of(r)), s(cell_name(r)),
        s(_bin_filter(r)), s(outcome), r.store_units, r.store_tokens, held_memories(r, s), gold, conditions,
    ]


def story_payload(story: Story, q: int, s: Strings) -> tuple[dict[str, Any], list[list[Any]]]:
    """One question's part of the page's data, and its records' rows (``q``: the question's index).

    Texts are kept for the units a reader saw and the gold; a unit named only
    as the arrival that evicted a gold unit keeps its place and date.
    """
    units: dict[int, list[Any]] = {}
    # a derived memory's position is its cell's own (another system's memory may sit there): it gets a key
    # of the page, one per distinct memory, past every unit of the data
    derived: dict[tuple[str, str], int] = {}
    # the keys whose row holds the text: a unit's row is the same in every context that names it, so it is
    # made once (a question's units are named again by each of its cells and conditions)
    texted: set[int] = set()
    # a context the story shares between conditions (:func:`~pytest_restore.report.story.tell`) is read
    # once: its keys by the tuple's id, which the story holds while this runs
    told: dict[int, tuple[list[int], list[int]]] = {}

    for unit in story.gold:
        units[unit.position] = _unit_row(unit, True)
        texted.add(unit.position)
    rows = []
    for cell in story.cells:
        conditions = []
        for cond in cell.conditions:
            keys: list[int] | None = None
            forced: list[int] | None = None
            known = told.get(id(cond.seen)) if cond.seen is not None else None
            if known is not None:
                keys, forced = known
            elif cond.seen is not None:
                keys, forced = [], []
                for x in cond.seen:
                    unit = x.unit
                    k = unit.position if unit.session >= 0 else derived.setdefault((unit.label, unit.content), DERIVED_KEYS + len(derived))
                    if k not in texted:
                        units[k] = _unit_row(unit, True)
                        texted.add(k)
                    keys.append(k)
                    if x.forced:
                        forced.append(k)
                told[id(cond.seen)] = (keys, forced)
            conditions.append([s(cond.name), s(cond.about), s(cond.answer), cond.correct, cond.tokens, keys, forced])
        gold = []
        for fate in cell.gold:
            after = fate.evicted_after
            if after is not None and after.position not in units:
                units[after.position] = _unit_row(after, False)
            rank = fate.rank if fate.rank_known else "?"
            gold.append([fate.unit.position, fate.evicted, after.position if after is not None else None, rank, s(fate.fate)])
        rows.append(_row(cell.record, q, cell.outcome, gold, conditions, s))
    question = story.question
    entry = {
        "id": question.question_id,
        "type": question.question_type,
        "question": question.question,
        "reference": question.answer,
        "date": question.question_date,
        "gold": [u.position for u in story.gold],
        "units": {str(k): v for k, v in sorted(units.items())},
    }
    return entry, rows


def _questionless(records: Sequence[Record], q: int, s: Strings) -> tuple[dict[str, Any], list[list[Any]]]:
    """A question's part when the data file is not at hand: what its records say, without texts."""
    r = records[0]
    entry = {
        "id": r.question_id, "type": r.question_type, "question": r.question or "", "reference": r.reference or "",
        "date": "", "gold": [], "units": {},
    }
    return entry, [_row(x, q, x.excluded or x.bin or NO_BIN, [], [], s) for x in sorted(records, key=record_order)]


def page_data(
    records: Sequence[Record], dataset: Dataset | None, texts_note: str = "", versions: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Everything the page's script reads: the questions (texts included), the records' stories, the filters' values.

    The records keep their order, so the page's record ``i`` is line ``i + 1`` of ``records.jsonl``.
    ``versions``: each memory library's version by policy, named above its store beside the others'.
    """
    by_question: dict[str, list[Record]] = {}
    for r in records:
        by_question.setdefault(r.question_id, []).append(r)
    known = {q.question_id: q for q in dataset.questions} if dataset is not None else {}
    strings = Strings()
    questions: list[dict[str, Any]] = []
    row_of: dict[int, list[Any]] = {}
    for qid, mine in by_question.items():
        if qid in known:
            entry, part = story_payload(tell(mine, known[qid]), len(questions), strings)
        else:
            entry, part = _questionless(mine, len(questions), strings)
        questions.append(entry)
        for record, row in zip(sorted(mine, key=record_order), part):
            row_of[id(record)] = row
    rows = [row_of[id(r)] for r in records]
    policies = sorted({r.policy for r in records}, key=policy_order)
    return {
        "strings": strings.table(),
        "record_fields": list(RECORD_FIELDS),
        "condition_fields": list(CONDITION_FIELDS),
        "questions": questions,
        "records": rows,
        "held_fields": list(HELD_FIELDS),
        "versions": dict(sorted((versions or {}).items())),
        "texts": texts_note,
        "filters": {
            "policy": policies,
            "budget": sorted({r.budget for r in records}, reverse=True),
            "regime": sorted({r.regime for r in records}),
            "bin": [b for b in (*BINS, NO_BIN, EXCLUDED) if any(_bin_filter(r) == b for r in records)],
            "type": sorted({q["type"] for q in questions}),
        },
    }


def pack(data: Mapping[str, Any]) -> str:
    """The page's data as base64 of gzipped JSON (the browser's ``DecompressionStream`` opens it); deterministic."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    # zlib's level 5: on the 500-question grid's 21.7 MB of JSON, level 9 took 2.3 CPU s, the default (6)
    # 1.1 and 5 0.6 (the largest part of the page process, the tail's longer path) for data 1% and 2.4% larger
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=5, mtime=0)).decode("ascii")


def unpack(packed: str) -> dict[str, Any]:
    """:func:`pack` undone (for tests and tools reading a page's data)."""
    data = json.loads(gzip.decompress(base64.b64decode(packed)).decode("utf-8"))
    assert isinstance(data, dict)
    return data


# -- markdown to HTML, for the sections the page shares with report.md -------------------------------


#: A character :func:`~pytest_restore.report.inputs.md_text` escaped: text, never syntax.
_ESCAPED = re.compile(r"\\([\\`*_\[\]<>|])")


def _inline(text: str) -> str:
    held: list[str] = []

    def hold(match: re.Match[str]) -> str:
        # an escaped character is held apart while the syntax is read, then put back as text
        held.append(match.group(1))
        return f"\x00{len(held) - 1}\x00"

    out = html.escape(_ESCAPED.sub(hold, text), quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub("\x00(\\d+)\x00", lambda m: html.escape(held[int(m.group(1))], quote=False), out)


def _table_cells(line: str) -> list[str]:
    """A markdown table row's cells, split on the bars that are not escaped (a name may hold one)."""
    return [c.strip() for c in re.findall(r"((?:\\.|[^|\\])*)\|", line.strip()[1:] + "|")][:-1] or [""]


def markdown_html(text: str) -> str:
    """The markdown report.md's findings and tables use (headings, bullets, tables, paragraphs) as HTML."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level + 1}>{_inline(line[level:].strip())}</h{level + 1}>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(_table_cells(lines[i]))
                i += 1
            head, body = block[0], [row for row in block[2:]]
            numeric = [c.endswith(":") for c in block[1]] if len(block) > 1 else []
            out.append(
                "<table><thead><tr>"
                + "".join(f"<th>{_inline(c)}</th>" for c in head)
                + "</tr></thead><tbody>"
                + "".join(
                    "<tr>"
                    + "".join(
                        f"<td{' class=num' if j < len(numeric) and numeric[j] else ''}>{_inline(c)}</td>"
                        for j, c in enumerate(row)
                    )
                    + "</tr>"
                    for row in body
                )
                + "</tbody></table>"
            )
            continue
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
        i += 1
    return "\n".join(out)


# -- the page ----------------------------------------------------------------------------------------


def _svg_inline(svg: str) -> str:
    """The figure's SVG as an element of the page (no XML declaration, doctype or metadata)."""
    start = svg.find("<svg")
    return re.sub(r"<metadata>.*?</metadata>\s*", "", svg[start:], flags=re.DOTALL) if start >= 0 else ""


def render_html(
    records: Sequence[Record],
    sections: tuple[str, str, str],
    *,
    versions: Mapping[str, str],
    figure_svg: str,
    dataset: Dataset | None,
    texts_note: str = "",
    opening: Sequence[str] = (),
    notes: Sequence[str] = (),
    packed: str | None = None,
) -> str:
    """``report.html`` as text: findings, figure, cells tables, then every record's story.

    ``sections`` are report.md's findings and its cells tables of regimes (b) and (a), as markdown
    (:class:`~pytest_restore.report.markdown.ReportMarkdown`); ``versions`` each memory library's version
    by policy (``ReportModel.versions``). ``opening`` are report.md's first lines (the run line, a simulated or
    partial notice), shown first; ``dataset`` gives the texts (``None``: the
    page says why they are missing, ``texts_note``); ``notes`` say what the
    cells table's rows do not (``ReportFiles.notes``), under it. ``packed``:
    the page's data when it was made already (``pack(page_data(...))``, by
    another process), in place of ``records``, ``dataset`` and ``texts_note``.
    """
    if packed is None:
        packed = pack(page_data(records, dataset, texts_note, versions))
    findings, cells_b, cells_a = sections
    shown = [
        "<h1>Restore-counterfactual audit</h1>",
        *(markdown_html(line) for line in opening if line.strip()),
        markdown_html(findings),
        '<h2 id="figure-title">Figure</h2>',
        f'<figure id="figure">{_svg_inline(figure_svg)}</figure>',
        '<h2 id="cells">Regime (b): top-k retrieval</h2>',
        markdown_html(cells_b),
        *([markdown_html("\n".join(["**Budgets that never bound.**", "", *(f"- {n}" for n in notes)]))] if notes else []),
        "<h2>Regime (a): forced surviving gold</h2>",
        markdown_html(cells_a),
        markdown_html(
            "report.md, beside this page, holds the run's other sections: retrieval, the hypothesis tests, "
            "cost per question, the memory systems and scores, the run's checks and settings."
        ),
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>Restore-counterfactual audit</title><style>{_STYLE}</style></head><body>\n"
        + "<main>\n"
        + "\n".join(shown)
        + _BROWSER
        + "</main>\n"
        + f'<script type="application/octet-stream" id="data">{packed}</script>\n'
        + f"<script>{_SCRIPT}</script>\n</body></html>\n"
    )


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1a1a1a;background:#fff}
main{max-width:1200px;margin:0 auto;padding:1em 1.5em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}td.num{text-align:right}
th{background:#f2f2f2}
figure{margin:0}figure svg{width:100%;max-width:1000px;height:auto}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
#filters{display:flex;flex-wrap:wrap;gap:.6em;align-items:end;margin:.5em 0}
#filters label{display:flex;flex-direction:column;font-size:12px;color:#444}
#rows tbody tr{cursor:pointer}#rows tbody tr:hover{background:#eef4fb}#rows tr.open{background:#dde8f6}
.bin-irreversible{color:#8a2a3a;font-weight:600}.bin-recoverable{color:#004488;font-weight:600}
.bin-distorted{color:#8a6500;font-weight:600}.bin-residual{color:#555;font-weight:600}
#story{border:1px solid #bbb;border-radius:4px;padding:.6em 1em;margin:1em 0;background:#fafafa}
#story:empty{display:none}
.unit{margin:.15em 0;padding:.2em .4em;border-left:3px solid #ccc;background:#fff}
.unit.gold{border-left-color:#BB5566;background:#fbf1f3}
.mark{display:inline-block;font-size:11px;padding:0 .4em;border-radius:3px;margin-right:.3em;border:1px solid #999}
.mark.gold{background:#BB5566;color:#fff;border-color:#BB5566}.mark.forced{background:#004488;color:#fff;border-color:#004488}
.mark.ranked{background:#fff;color:#333}
.where{color:#555;font-size:12px}.text{white-space:pre-wrap}
.unit.gold>.text{max-height:12em;overflow:auto}
.condition{margin-top:.8em}.condition h4{margin:.2em 0}
.ok{color:#1a6b2a;font-weight:600}.bad{color:#a11;font-weight:600}
.note{color:#a11}
#story-side{display:grid;grid-template-columns:repeat(auto-fill,minmax(270px,1fr));gap:.6em;margin-top:.4em}
.store{border:1px solid #ccc;border-radius:4px;padding:.3em .5em;background:#fff}.store.open{border-color:#004488}
.store h5{margin:.2em 0;font-size:13px}.store .unit{font-size:12px}.store .text{max-height:8em;overflow:auto}
.mark.read{background:#eef4fb;color:#004488;border-color:#004488}.mark.evicted{background:#fff;color:#8a2a3a;border-color:#8a2a3a}
"""

_BROWSER = """
<h2 id="questions">Questions</h2>
<p>Every record: one question under one policy, budget, seed and regime. Filter them, then open one to see why it
landed in its bin: its gold and when it was evicted, what each condition's reader saw, the answers and verdicts.</p>
<div id="filters">
<label>policy<select id="f-policy"></select></label>
<label>budget<select id="f-budget"></select></label>
<label>regime<select id="f-regime"></select></label>
<label>bin<select id="f-bin"></select></label>
<label>question type<select id="f-type"></select></label>
<label>question id or text<input id="f-text" type="search" size="24"></label>
</div>
<p id="count"></p>
<p id="texts" class="note"></p>
<div id="story"></div>
<table id="rows"><thead><tr><th>line</th><th>question</th><th>type</th><th>policy</th><th>budget</th><th>seed</th>
<th>regime</th><th>bin</th><th>oracle</th><th>policy</th><th>restored</th>
<th title="a memory system's memories citing gold forced into the context: wrong here with restored right is distorted">forced memories</th></tr></thead><tbody></tbody></table>
<p><button id="more" type="button">show more</button></p>
"""

_SCRIPT = r"""
"use strict";
let DATA = null;
const FILTERS = ["policy", "budget", "regime", "bin", "type"];
const PAGE = 200;
let shown = PAGE, matches = [], openIndex = null;
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s === null || s === undefined ? "" : s).replace(/[&<>"]/g,
  (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const verdict = (c) => c === true ? '<span class="ok">correct</span>' : c === false ? '<span class="bad">wrong</span>' : "no verdict";
const budgetLabel = (b) => b % 1000 === 0 && b > 0 ? (b / 1000) + "k" : String(b);

function where(q, pos) {
  const u = q.units[String(pos)];
  if (!u) return "#" + pos;
  if (u[0] < 0) return u[5] || "a derived memory";
  return "#" + pos + " session " + u[0] + (u[1] >= 0 ? ", turn " + u[1] : "") + " (" + u[2] + ", " + u[3] + ")";
}

function state() {
  const s = {};
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    if (!part) continue;
    const i = part.indexOf("=");
    s[decodeURIComponent(i < 0 ? part : part.slice(0, i))] = i < 0 ? "" : decodeURIComponent(part.slice(i + 1));
  }
  return s;
}

function setState() {
  const parts = [];
  for (const f of FILTERS) { const v = $("f-" + f).value; if (v) parts.push(f + "=" + encodeURIComponent(v)); }
  const t = $("f-text").value; if (t) parts.push("text=" + encodeURIComponent(t));
  if (openIndex !== null) parts.push("open=" + openIndex);
  history.replaceState(null, "", "#" + parts.join("&"));
}

function matching() {
  const want = {};
  for (const f of FILTERS) want[f] = $("f-" + f).value;
  const text = $("f-text").value.trim().toLowerCase();
  const out = [];
  DATA.records.forEach((r, i) => {
    const q = DATA.questions[r.q];
    if (want.policy && r.policy !== want.policy) return;
    if (want.budget && String(r.budget) !== want.budget) return;
    if (want.regime && r.regime !== want.regime) return;
    if (want.bin && r.bin !== want.bin) return;
    if (want.type && q.type !== want.type) return;
    if (text && !(q.id.toLowerCase().includes(text) || q.question.toLowerCase().includes(text))) return;
    out.push(i);
  });
  return out;
}

function renderRows() {
  const body = $("rows").tBodies[0];
  const html = [];
  for (const i of matches.slice(0, shown)) {
    const r = DATA.records[i], q = DATA.questions[r.q], c = r.conditions;
    const v = (k) => c[k] ? verdict(c[k].correct) : "";
    html.push('<tr data-index="' + i + '"' + (i === openIndex ? ' class="open"' : "") + "><td>" + (i + 1) + "</td><td>" +
      esc(q.id) + "</td><td>" + esc(q.type) + "</td><td>" + esc(r.policy) + "</td><td>" + budgetLabel(r.budget) +
      "</td><td>" + r.seed + "</td><td>" + r.regime + '</td><td class="bin-' + r.bin.replace(/ /g, "-") + '">' +
      esc(r.bin) + "</td><td>" + v(0) + "</td><td>" + v(1) + "</td><td>" + v(2) + "</td><td>" + v(3) + "</td></tr>");
  }
  body.innerHTML = html.join("");
  $("count").textContent = matches.length + " of " + DATA.records.length + " records match" +
    (matches.length > shown ? "; the first " + shown + " are listed" : "");
  $("more").hidden = matches.length <= shown;
}

function renderStory(i) {
  const box = $("story");
  if (i === null || !DATA.records[i]) { box.innerHTML = ""; return; }
  const r = DATA.records[i], q = DATA.questions[r.q];
  const gold = new Set(q.gold);
  const out = [];
  out.push('<h3 id="story-title">' + esc(q.id) + " (" + esc(q.type) + "): " + esc(r.policy) + " " + budgetLabel(r.budget) +
    ", seed " + r.seed + ", regime " + r.regime + ': <span id="story-outcome" class="bin-' + r.bin.replace(/ /g, "-") + '">' +
    esc(r.outcome) + "</span></h3>");
  out.push('<p><strong>question</strong> <span id="story-question">' + esc(q.question) + "</span>" +
    (q.date ? ' <span class="where">(asked ' + esc(q.date) + ")</span>" : "") + "<br><strong>reference</strong> " +
    '<span id="story-reference">' + esc(q.reference) + "</span></p>");
  out.push('<p class="where">reader ' + esc(r.reader) + ", judge " + esc(r.judge || "?") + ", ranker " + esc(r.ranker) +
    "; store " + (r.store_units === null ? "?" : r.store_units) + " units, " +
    (r.store_tokens === null ? "?" : r.store_tokens) + " tokens</p>");
  out.push("<h4>Gold (" + q.gold.length + ")</h4><div id=\"story-gold\">");
  for (const [pos, evicted, after, rank, fate] of r.gold) {
    const u = q.units[String(pos)];
    out.push('<div class="unit gold" data-pos="' + pos + '" data-evicted="' + evicted + '"><span class="where">' +
      esc(where(q, pos)) + ": arrived at #" + pos + "; <span class=\"fate\">" + esc(fate) + "</span></span>" +
      '<div class="text">' + esc(u ? u[4] : "") + "</div></div>");
  }
  out.push("</div>");
  r.conditions.forEach((c, k) => {
    out.push('<div class="condition" data-condition="' + k + '"><h4>' + esc(c.name) + ": " + esc(c.about) + " (" +
      (c.seen === null ? "units not recorded" : c.seen.length + " units") + (c.tokens === null ? "" : ", " + c.tokens + " tokens") +
      ")</h4><p>answer (" + verdict(c.correct) + '): <span class="answer">' + esc(c.answer === null ? "-" : c.answer) + "</span></p>");
    const forced = new Set(c.forced || []);
    for (const pos of c.seen || []) {
      const u = q.units[String(pos)];
      const marks = (gold.has(pos) ? ['<span class="mark gold">gold</span>'] : [])
        .concat([forced.has(pos) ? '<span class="mark forced">forced</span>' : '<span class="mark ranked">ranked</span>']);
      out.push('<div class="unit seen' + (gold.has(pos) ? " gold" : "") + '" data-pos="' + pos + '" data-forced="' +
        forced.has(pos) + '">' + marks.join("") + '<span class="where">' + esc(where(q, pos)) + "</span>" +
        '<details><summary class="text">' + esc(u && u[4] !== null ? u[4].replace(/\s+/g, " ").slice(0, 160) : "") + "</summary>" +
        '<div class="text">' + esc(u ? u[4] : "") + "</div></details></div>");
    }
    out.push("</div>");
  });
  out.push(renderSide(r, q));
  box.innerHTML = out.join("");
}

// The question's other stores at the same budget, side by side: each policy's regime-(b) record under the same
// reader and ranker (the opened record's seed for its own policy, the first seed for the others). A memory
// system shows the memories its record names (those citing the gold, then the others a reader saw), each with
// the turns it cites; a store of raw turns shows its gold turns, kept or evicted.
function renderSide(r, q) {
  const peers = new Map();
  DATA.records.forEach((x) => {
    if (x.q !== r.q || x.budget !== r.budget || x.regime !== "b" || x.reader !== r.reader || x.ranker !== r.ranker) return;
    if (x.policy === r.policy ? x.seed === r.seed : !peers.has(x.policy)) peers.set(x.policy, x);
  });
  if (peers.size < 2) return "";
  const out = ['<h4 id="story-side-title">Every store of this question at ' + budgetLabel(r.budget) +
    ", side by side (regime b; a seeded policy's first seed)</h4><div id=\"story-side\">"];
  for (const [policy, x] of peers) {
    const version = DATA.versions[policy];
    out.push('<div class="store' + (policy === r.policy ? " open" : "") + '" data-policy="' + esc(policy) + '"' +
      (version ? ' data-library="' + esc(version) + '"' : "") + "><h5>" + esc(policy) +
      (version ? ' <span class="where">' + esc(version) + "</span>" : "") + ' <span class="bin-' + x.bin.replace(/ /g, "-") +
      '">' + esc(x.bin === "no bin" && x.conditions[1] && x.conditions[1].correct ? "answered right" : x.bin) +
      '</span></h5><p class="where">' + (x.store_units === null ? "?" : x.store_units) +
      (x.held === null ? " turns, " : " memories, ") + (x.store_tokens === null ? "?" : x.store_tokens) + " tokens held</p>");
    if (x.held === null) {
      for (const [pos, evicted] of x.gold) {
        const u = q.units[String(pos)];
        out.push('<div class="unit gold held-turn" data-pos="' + pos + '"><span class="mark ' + (evicted ? "evicted" : "gold") + '">' +
          (evicted ? "gold evicted" : "gold kept") + '</span><span class="where">' + esc(where(q, pos)) + "</span>" +
          (evicted ? "" : '<div class="text">' + esc(u ? u[4] : "") + "</div>") + "</div>");
      }
    } else {
      if (!x.held.length) out.push('<p class="where">no held memory cites the gold, and the reader saw none</p>');
      for (const m of x.held) {
        const marks = (m.gold ? ['<span class="mark gold">cites gold</span>'] : []).concat(m.seen ? ['<span class="mark read">read</span>'] : []);
        out.push('<div class="unit memory' + (m.gold ? " gold" : "") + '" data-gold="' + m.gold + '">' + marks.join("") +
          '<span class="where">' + esc(m.where) + '</span><div class="text">' + esc(m.text) + "</div></div>");
      }
    }
    out.push("</div>");
  }
  out.push("</div>");
  return out.join("");
}

function update(keepShown) {
  if (!keepShown) shown = PAGE;
  matches = matching();
  renderRows();
  renderStory(openIndex);
  setState();
}

async function load() {
  // the data: gzipped JSON in base64 (report/html.py's pack), opened with the browser's own gzip
  const binary = atob($("data").textContent.trim());
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  const text = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  const raw = JSON.parse(text), S = raw.strings;
  const str = (i) => i === null ? null : S[i];
  const named = (fields, row) => Object.fromEntries(fields.map((f, k) => [f, row[k]]));
  const records = raw.records.map((row) => {
    const r = named(raw.record_fields, row);
    for (const f of ["policy", "reader", "judge", "ranker", "cell", "bin", "outcome"]) r[f] = str(r[f]);
    r.gold = r.gold.map((g) => [g[0], g[1], g[2], g[3], str(g[4])]);
    r.conditions = r.conditions.map((c) => {
      const o = named(raw.condition_fields, c);
      for (const f of ["name", "about", "answer"]) o[f] = str(o[f]);
      return o;
    });
    r.held = r.held === null ? null : r.held.map((m) => {
      const o = named(raw.held_fields, m);
      for (const f of ["where", "text"]) o[f] = str(o[f]);
      return o;
    });
    return r;
  });
  return {questions: raw.questions, records: records, texts: raw.texts, filters: raw.filters, versions: raw.versions};
}

async function init() {
  DATA = await load();
  for (const f of FILTERS) {
    const sel = $("f-" + f);
    sel.innerHTML = '<option value="">all</option>' + DATA.filters[f].map((v) =>
      '<option value="' + esc(v) + '">' + esc(f === "budget" ? budgetLabel(v) : v) + "</option>").join("");
    sel.addEventListener("change", () => update(false));
  }
  $("f-text").addEventListener("input", () => update(false));
  $("more").addEventListener("click", () => { shown += PAGE; renderRows(); });
  $("rows").tBodies[0].addEventListener("click", (e) => {
    const tr = e.target.closest("tr"); if (!tr) return;
    openIndex = Number(tr.dataset.index); update(true); $("story").scrollIntoView();
  });
  $("texts").textContent = DATA.texts;
  const s = state();
  for (const f of FILTERS) if (s[f] !== undefined) $("f-" + f).value = s[f];
  if (s.text !== undefined) $("f-text").value = s.text;
  if (s.open !== undefined && s.open !== "") openIndex = s.open === "first" ? null : Number(s.open);
  matches = matching();
  if (s.open === "first" && matches.length) openIndex = matches[0];
  update(true);
  document.body.dataset.ready = "1";
  console.info("report.html: ready");  // a browser's log says when: benches/bench_inspect.py times the page by it
}
init().catch((e) => { $("count").textContent = "The page could not read its data: " + e; });
"""
