"""The beam tree of one dumped sentence (beam_dump.py), laid out on a grid: what the page draws.

A column per step (the start token in column 0, step t in column t+1). In each beam (group) a
row per slot, and below them the hypotheses that ended, stacked per step: an ended hypothesis
is a node of its own, a leaf beside the slot it would have filled, hanging from the slot of
the step before that it extends. Diverse groups are stacked one under the other.

Each node knows whether it leads to a finished hypothesis (else its branch was pruned: the
beam dropped it), and which n-best paths run through it (rank 0 is the 1-best). A path is
followed exactly as `Beam.get_hyp` follows it: from the finished record back through
`beam_parent_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COLUMN = 112  # px between steps
ROW = 40  # px between slots
MARGIN = 24
LEFT = 64  # x of column 0: a margin and half a node's box


@dataclass
class Node:
    id: str
    group: int
    step: int  # -1 for the start node
    slot: int  # slot index; for an ended hypothesis its place in the `finished` list
    token: int | None
    piece: str
    score: float | None  # running total log-prob; an ended hypothesis: its ranking score
    parent: str | None
    kind: str  # "start", "slot" or "ended"
    x: float = 0.0
    y: float = 0.0
    ended: bool = False  # an ended hypothesis that ends with EOS (False: cut at the step limit)
    log_prob: float | None = None
    live: bool = False  # leads to an ended hypothesis
    ranks: list[int] = field(default_factory=list)  # the n-best paths through it


@dataclass
class Tree:
    nodes: list[Node]
    paths: list[list[str]]  # per n-best entry: node ids from the start to its ended node ([] for a filler)
    width: float
    height: float

    def node(self, node_id: str) -> Node:
        return self._by_id[node_id]

    def __post_init__(self) -> None:
        self._by_id = {n.id: n for n in self.nodes}


def slot_id(group: int, step: int, slot: int) -> str:
    return f"g{group}s{step}k{slot}"


def ended_id(group: int, index: int) -> str:
    return f"g{group}e{index}"


def piece_of(record: dict, token: int | None) -> str:
    return "<s>" if token is None else record["pieces"].get(str(token), f"<{token}>")


def _beam_nodes(record: dict, group: int, beam: dict, top: float) -> tuple[list[Node], float]:
    """The nodes of one beam, its slots from y = top; returns them and the height they take."""
    nodes, steps = [], beam["predicted_ids"]
    slots = max((len(s) for s in steps), default=1)
    for t, (tokens, parents, scores) in enumerate(zip(steps, beam["beam_parent_ids"], beam["scores"])):
        for j, (token, score) in enumerate(zip(tokens, scores)):
            parent = "start" if t == 0 else slot_id(group, t - 1, parents[j])
            nodes.append(
                Node(
                    slot_id(group, t, j),
                    group,
                    t,
                    j,
                    token,
                    piece_of(record, token),
                    score,
                    parent,
                    "slot",
                    x=LEFT + (t + 1) * COLUMN,
                    y=top + j * ROW,
                )
            )
    stacked: dict[int, int] = {}  # step -> ended hypotheses placed in its column so far
    for i, f in enumerate(beam["finished"]):
        t = f["step"]
        below = stacked.get(t, 0)
        stacked[t] = below + 1
        parent = "start" if t == 0 else slot_id(group, t - 1, f["parent"])
        nodes.append(
            Node(
                ended_id(group, i),
                group,
                t,
                i,
                f["token"],
                piece_of(record, f["token"]),
                f["score"],
                parent,
                "ended",
                x=LEFT + (t + 1) * COLUMN,
                y=top + (slots + below) * ROW + ROW / 2,
                ended=f["ended"],
                log_prob=f["log_prob"],
            )
        )
    rows = slots + max(stacked.values(), default=0)
    return nodes, rows * ROW + ROW


def layout(record: dict) -> Tree:
    """The tree of one dumped sentence."""
    nodes, steps = [], 0
    top: float = MARGIN
    for g, beam in enumerate(record["beams"]):
        group_nodes, height = _beam_nodes(record, g, beam, top)
        nodes += group_nodes
        top += height
        steps = max([steps, len(beam["predicted_ids"])] + [f["step"] + 1 for f in beam["finished"]])
    start = Node("start", -1, -1, 0, None, "<s>", 0.0, None, "start", x=LEFT, y=MARGIN)
    tree = Tree([start] + nodes, [], LEFT * 2 + steps * COLUMN, max(top, MARGIN + ROW) + MARGIN)
    _mark_live(tree)
    tree.paths = [_mark_path(tree, entry, rank) for rank, entry in enumerate(record["nbest"])]
    return tree


def _mark_live(tree: Tree) -> None:
    """Every ancestor of an ended hypothesis leads somewhere; the rest was pruned."""
    for node in tree.nodes:
        if node.kind == "ended":
            current: Node | None = node
            while current is not None and not current.live:
                current.live = True
                current = tree.node(current.parent) if current.parent else None


def _mark_path(tree: Tree, entry: dict, rank: int) -> list[str]:
    """The node ids of an n-best entry's path, start first, each marked with `rank`."""
    if entry.get("finished") is None:
        return []
    path: list[str] = []
    current: Node | None = tree.node(ended_id(entry["beam"], entry["finished"]))
    while current is not None:
        current.ranks.append(rank)
        path.append(current.id)
        current = tree.node(current.parent) if current.parent else None
    return path[::-1]


def path_tokens(tree: Tree, path: list[str]) -> list[int]:
    """The tokens along a path (the start node has none), as `get_hyp` returns them plus the final token."""
    tokens = (tree.node(i).token for i in path)
    return [token for token in tokens if token is not None]  # the start node's is None
