"""One self-contained HTML page of dumped searches: inline SVG, CSS and script, nothing fetched.

Per sentence: its facts (search, beam, stop rule, length penalty), the n-best list, the beam
tree (tree.py's layout; faded: branches the beam pruned and empty slots; outlined: the ended
hypotheses with their final scores; coloured: the n-best paths, the 1-best strongest), and,
when the dump has attention, a heatmap of the 1-best's cross-attention (source pieces across,
target pieces down) with each target token's aligned source position ringed.

Readable at any size: a tree or heatmap larger than the window scrolls in its own box, and
"hide pruned branches" removes what the beam dropped (on from the start above
COLLAPSE_ABOVE nodes), leaving the paths that ended.
"""

from __future__ import annotations

from html import escape

from .tree import Node, Tree, layout, piece_of

BOX_W, BOX_H = 92, 30
CELL = 22  # heatmap cell, px
COLLAPSE_ABOVE = 400  # nodes: a larger tree starts with its pruned branches hidden


def _num(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _short(piece: str, limit: int = 11) -> str:
    return piece if len(piece) <= limit else piece[: limit - 1] + "…"


def _node_classes(node: Node) -> str:
    classes = ["node", node.kind, "live" if node.live or node.kind == "start" else "pruned"]
    if node.score is None and node.kind == "slot":
        classes.append("empty")
    if node.ranks:
        classes.append("nbest")
    if 0 in node.ranks:
        classes.append("best")
    if node.kind == "ended" and not node.ended:
        classes.append("cut")
    return " ".join(classes)


def _node_svg(node: Node) -> str:
    if node.kind == "ended":
        label = f"= {_num(node.score)}" + (f" #{min(node.ranks) + 1}" if node.ranks else "")
        title = (
            f"step {node.step}: {node.piece} ({'ended' if node.ended else 'cut at the step limit'}), "
            f"score {_num(node.score, 4)}, log-prob {_num(node.log_prob, 4)}"
        )
    else:
        label = _num(node.score)
        title = (
            "start"
            if node.kind == "start"
            else f"step {node.step}, slot {node.slot}: {node.piece} (id {node.token}), log-prob {_num(node.score, 4)}"
        )
    token = "" if node.token is None else f' data-token="{node.token}"'
    token += f' data-ranks="{" ".join(map(str, node.ranks))}"' if node.ranks else ""
    return (
        f'<g class="{_node_classes(node)}" data-node="{node.id}" data-x="{node.x:g}" data-y="{node.y:g}"'
        f'{token} transform="translate({node.x:g},{node.y:g})"><title>{escape(title)}</title>'
        f'<rect x="{-BOX_W / 2:g}" y="{-BOX_H / 2:g}" width="{BOX_W}" height="{BOX_H}" rx="5"/>'
        f'<text class="piece" y="-2">{escape(_short(node.piece))}</text>'
        f'<text class="score" y="11">{escape(label)}</text></g>'
    )


def _edge_svg(parent: Node, node: Node) -> str:
    x1, y1, x2, y2 = parent.x + BOX_W / 2, parent.y, node.x - BOX_W / 2, node.y
    middle = (x1 + x2) / 2
    classes = (
        ["edge", "live" if node.live else "pruned"]
        + (["nbest"] if node.ranks else [])
        + (["best"] if 0 in node.ranks else [])
    )
    return (
        f'<path class="{" ".join(classes)}" data-child="{node.id}" '
        f'd="M{x1:g},{y1:g} C{middle:g},{y1:g} {middle:g},{y2:g} {x2:g},{y2:g}"/>'
    )


def tree_svg(tree: Tree) -> str:
    # the n-best nodes and their edges last, the best one at the very end: drawn over the others
    nodes = sorted(tree.nodes, key=lambda n: (bool(n.ranks), 0 in n.ranks))
    edges = "".join(_edge_svg(tree.node(n.parent), n) for n in nodes if n.parent)
    return (
        f'<svg class="tree" xmlns="http://www.w3.org/2000/svg" width="{tree.width:g}" height="{tree.height:g}" '
        f'viewBox="0 0 {tree.width:g} {tree.height:g}"><g class="edges">{edges}</g>'
        f'<g class="nodes">{"".join(_node_svg(n) for n in nodes)}</g></svg>'
    )


def heatmap_svg(record: dict, entry: dict) -> str:
    """The cross-attention of one n-best entry: a row per target token, a column per source piece."""
    rows, sources = entry["attention"], record["source_pieces"]
    targets = [piece_of(record, t) for t in entry["tokens"]]
    aligned = entry.get("alignment") or [max(range(len(r)), key=r.__getitem__) if r else None for r in rows]
    left, top = 90, 70
    width, height = left + CELL * len(sources) + 10, top + CELL * len(rows) + 10
    parts = [f'<svg class="heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for j, piece in enumerate(sources):
        x = left + j * CELL + CELL / 2
        parts.append(
            f'<text class="src" transform="translate({x:g},{top - 6}) rotate(-55)">{escape(_short(piece))}</text>'
        )
    for i, (piece, row) in enumerate(zip(targets, rows)):
        y = top + i * CELL
        parts.append(f'<text class="tgt" x="{left - 6}" y="{y + CELL / 2 + 4:g}">{escape(_short(piece))}</text>')
        for j, weight in enumerate(row):
            ring = " aligned" if aligned[i] == j else ""
            parts.append(
                f'<rect class="cell{ring}" x="{left + j * CELL}" y="{y}" width="{CELL}" height="{CELL}" '
                f'fill-opacity="{weight:.3f}"><title>{escape(piece)} → {escape(sources[j])}: '
                f"{weight:.3f}</title></rect>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _facts(record: dict) -> str:
    if record["search"] == "none":
        return "nothing to decode (an empty line)"
    penalty = record["length_penalty"]
    groups = f", {record['groups']} groups" if record["groups"] > 1 else ""
    return (
        f"{record['search']} search, {record['beam_size']} slots{groups}, n-best {record['n_best']}, "
        f"stop rule {record['stop_rule']}, length penalty {penalty['name']} (alpha {penalty['alpha']:g}"
        f"{', offset %d' % penalty['offset'] if penalty['offset'] else ''}), at most {record['max_steps']} steps"
    )


def section_html(record: dict, shown: bool) -> str:
    line = record["index"] + 1
    tree = layout(record)
    nbest = "".join(
        f'<li class="{"best" if r == 0 else "nbest"}">{escape(e["text"])} '
        f'<span class="num">score {_num(e["score"], 4)}, log-prob {_num(e["log_prob"], 4)}'
        f"{'' if e['ended'] else ', cut at the step limit'}</span></li>"
        for r, e in enumerate(record["nbest"])
    )
    collapsed = " hide-pruned" if len(tree.nodes) > COLLAPSE_ABOVE else ""
    parts = [
        f'<section class="sentence{collapsed}" id="line-{line}" data-index="{record["index"]}"'
        f"{'' if shown else ' hidden'}>",
        f'<h2>line {line}: {escape(record["source"])}</h2><p class="facts">{escape(_facts(record))}</p>',
        f'<ol class="nbest">{nbest}</ol>',
    ]
    if record["beams"]:
        checked = " checked" if collapsed else ""
        parts.append(
            f'<label class="switch"><input type="checkbox" class="hide-pruned"{checked}> hide pruned '
            f'branches</label><div class="scroll">{tree_svg(tree)}</div>'
        )
    best = record["nbest"][0] if record["nbest"] else None
    if best and best.get("attention") and record["source_pieces"]:
        parts.append(f'<h3>attention of the best hypothesis</h3><div class="scroll">{heatmap_svg(record, best)}</div>')
    parts.append("</section>")
    return "".join(parts)


STYLE = """
body{font:14px system-ui,sans-serif;margin:0;display:flex;height:100vh;color:#222;background:#fff}
nav{width:230px;overflow:auto;border-right:1px solid #ddd;padding:8px;flex:none;background:#fafafa}
nav h1{font-size:15px;margin:4px 0 8px}nav ol{padding-left:22px;margin:0}
nav a{color:#235;text-decoration:none;display:block;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
nav a[aria-current]{font-weight:bold;color:#c30}
main{flex:1;overflow:auto;padding:8px 16px}h2{font-size:16px;margin:6px 0}h3{font-size:14px}
.facts,.num{color:#666;font-size:12px}.nbest li.best{font-weight:bold}
.scroll{overflow:auto;max-height:70vh;border:1px solid #eee;margin:6px 0}
svg text{font:11px system-ui,sans-serif;text-anchor:middle}svg .score{font-size:9px;fill:#555}
.node rect{fill:#eef3fb;stroke:#8aa4c8}.node.start rect{fill:#ddd;stroke:#888}
.node.ended rect{fill:#fff;stroke:#555;stroke-width:2}.node.ended.cut rect{stroke-dasharray:4 2}
.node.pruned{opacity:.35}.node.empty rect{fill:#fff;stroke-dasharray:2 2}
.node.nbest rect{fill:#fde7c8;stroke:#e08a1e;stroke-width:2}.node.best rect{fill:#f9c36b;stroke:#b35300;stroke-width:3}
.edge{fill:none;stroke:#9ab;stroke-width:1.2}.edge.pruned{stroke-opacity:.3}
.edge.nbest{stroke:#e08a1e;stroke-width:2.5}.edge.best{stroke:#b35300;stroke-width:4}
.hide-pruned .pruned{display:none}
.heatmap .cell{fill:#1b4f9c;stroke:#eee}.heatmap .aligned{stroke:#d40;stroke-width:2.5}
.heatmap .src{text-anchor:start}.heatmap .tgt{text-anchor:end}
"""

SCRIPT = """
const sections=[...document.querySelectorAll('section.sentence')];
const links=[...document.querySelectorAll('nav a')];
let current=Math.max(0,sections.findIndex(s=>!s.hidden));
function show(i){if(i<0||i>=sections.length)return;current=i;
 sections.forEach((s,k)=>{s.hidden=k!==i});
 links.forEach((a,k)=>{if(k===i)a.setAttribute('aria-current','true');else a.removeAttribute('aria-current')});}
links.forEach((a,k)=>a.addEventListener('click',e=>{e.preventDefault();show(k)}));
document.addEventListener('keydown',e=>{if(e.key==='ArrowDown'||e.key==='j')show(current+1);
 if(e.key==='ArrowUp'||e.key==='k')show(current-1)});
document.querySelectorAll('input.hide-pruned').forEach(box=>box.addEventListener('change',
 ()=>box.closest('section').classList.toggle('hide-pruned',box.checked)));
show(current);
// #layout: write where each node of the shown tree was drawn, relative to its svg (for tests)
if(location.hash==='#layout'){const out={};const svg=sections[current].querySelector('svg.tree');
 if(svg){const o=svg.getBoundingClientRect();out.svg=[o.x,o.y];svg.querySelectorAll('.node').forEach(n=>{
  const r=n.querySelector('rect').getBoundingClientRect();
  out[n.dataset.node]=[r.x+r.width/2-o.x,r.y+r.height/2-o.y]})}
 const pre=document.createElement('pre');pre.id='layout';pre.textContent=JSON.stringify(out);
 document.body.appendChild(pre);}
"""


def page_html(records: list[dict], title: str) -> str:
    links = "".join(
        f'<li value="{r["index"] + 1}"><a href="#line-{r["index"] + 1}">'
        f"{escape(r['source']) if r['source'].strip() else '(empty)'}</a></li>"
        for r in records
    )
    sections = "".join(section_html(r, shown=i == 0) for i, r in enumerate(records))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><nav><h1>{escape(title)}</h1><ol>{links}</ol></nav>"
        f"<main>{sections}</main><script>{SCRIPT}</script></body></html>\n"
    )
