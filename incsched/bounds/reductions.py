"""Exact reductions of the stage problem before CP-SAT: loadless nodes merged or placed by rule,
interchangeable branches ordered.

A *loadless* node has no parameters, reads no shared weight, and has no weighed compute time: its stage changes no stage's
load, only the traffic of its edges. Given everything else, its cost is linear in its stage,
``net(v) * s_v`` with ``net(v)`` = communication in minus communication out, between its latest
predecessor and its earliest successor. Hence three rules, each of which turns any assignment
into one that keeps them and costs no more (`StageReduction.apply`), so some optimum keeps them
all (`stage_reduction` states each):

- *merge*: a loadless node with one predecessor u and ``net >= 0`` moves onto u's stage (with one
  successor w and ``net <= 0``, onto w's). Its group then moves as one node; merges repeat on the
  contracted graph, so weightless chains (ReLU, reshape, dropout) fold into their layers.
- *place*: a loadless group with ``net > 0`` sits on its latest predecessor's stage, with
  ``net < 0`` on its earliest successor's (a join such as an ``add`` goes to its last input).
- *order*: branches with the same predecessors and successors, position by position the same
  parameters, shared weights read, compute and edge traffic, can be swapped; their first stages
  are put in order.

Why each move costs nothing extra, for every objective term and constraint the rules are built
for (``mem_peak``, ``comm_total``, ``comm_peak``, ``compute_peak``, ``spill``, ``grad_sync_peak``,
hard capacities): moving a loadless group changes no stage's parameters or compute (it reads no
shared weight, so no stage gains or loses one, and the set of stages holding each shared weight,
which alone decides the gradient sync, stays as it was: a reader is never loadless, so it is never
merged, placed or moved); ``comm_total`` changes by
``net * (new - old)`` <= 0; each boundary the group crosses changes its traffic by ``-net`` (moving
down) or ``+net`` (moving up), never up, so ``comm_peak`` does not rise. Every move lowers the
potential sum(net * stage) strictly, so the placing rules settle. Swapping interchangeable
branches maps each stage's loads and each boundary's traffic onto equal ones; a shared weight
read at position i is read there by every branch of the class, so the set of stages holding a
reader, and with it what each stage holds and syncs, is the same after the swap. Problems of the
pipeline model (send times, activation memory) get no rules: there a stage's time depends on the
edges it sends. Nor does training mode: it forbids empty stages, and a merge or a placing rule may
move a stage's only node away (a loadless chain's tail onto its head's stage). (Training memory's working-set and optimizer-step terms are maxima over a stage's
nodes: a merge that takes its members' maxima, as `incsched.graph.coarsen.quotient` does, keeps
every stage's bytes, and `StageProblem.node_memory_coef`, which the bounds' stage ranges read,
counts them for a node alone, a true lower bound on any stage holding it.) Checked against brute force on small random graphs in ``tests/test_stage_reduce.py``.

Valid for the whole problem, and for a model restricted to a window that holds every answer at
least as good as some answer (the precedence window of `incsched.bounds.stage`): every move keeps
an optimum optimal. Not for arbitrary windows (a band around an incumbent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..problems.stage import StageProblem

__all__ = ["StageReduction", "stage_reduction"]


@dataclass(frozen=True)
class StageReduction:
    """The rules `stage_reduction` found for one problem.

    ``group[v]``: the node whose stage v takes (v itself when not merged). ``merges``: (v, t) in
    the order made, each moving group v onto group t. ``earliest``/``latest``: (group, its
    predecessor / successor groups) placed on the latest predecessor's / earliest successor's
    stage. ``classes``: lists of interchangeable branches, each branch a list of groups; ``order``:
    the pairs (a, b) of first groups of consecutive branches in a class, ``s_a <= s_b``.
    """

    group: np.ndarray
    merges: tuple[tuple[int, int], ...]
    earliest: tuple[tuple[int, tuple[int, ...]], ...]
    latest: tuple[tuple[int, tuple[int, ...]], ...]
    classes: tuple[tuple[tuple[int, ...], ...], ...]

    @property
    def order(self) -> list[tuple[int, int]]:
        """(a, b) with ``s_a <= s_b``: the first groups of consecutive branches of each class."""
        return [(c[i][0], c[i + 1][0]) for c in self.classes for i in range(len(c) - 1)]

    @property
    def n_groups(self) -> int:
        return int(np.unique(self.group).size)

    def summary(self) -> dict:
        """Counts for the run's log: merged nodes, placed groups, ordered branches, groups left."""
        return {"merged": len(self.merges), "placed": len(self.earliest) + len(self.latest),
                "ordered_branches": sum(len(c) for c in self.classes), "groups": self.n_groups}

    def holds(self, stages) -> bool:
        """Whether an assignment keeps every rule."""
        s = np.asarray(stages, dtype=np.int64)
        if np.any(s != s[self.group]):
            return False
        if any(s[g] != max(s[list(ps)]) for g, ps in self.earliest) or any(s[g] != min(s[list(ws)]) for g, ws in self.latest):
            return False
        return all(s[a] <= s[b] for a, b in self.order)

    def apply(self, stages) -> np.ndarray:
        """An assignment that keeps every rule and costs no more than ``stages`` (which must meet
        precedence): merges in their order, then placing until nothing moves, then each class of
        branches sorted."""
        s = np.asarray(stages, dtype=np.int64).copy()
        members = {}
        for v, t in self.merges:
            moved = members.pop(v, [v])
            s[moved] = s[t]
            members.setdefault(t, [t]).extend(moved)
        # Placing lowers sum(net * stage) strictly with every move: it settles.
        moved = True
        while moved:
            moved = False
            for g, ps in self.earliest:
                m = max(s[list(ps)])
                if s[g] != m:
                    s[g], moved = m, True
            for g, ws in self.latest:
                m = min(s[list(ws)])
                if s[g] != m:
                    s[g], moved = m, True
        for branches in self.classes:
            vectors = sorted(tuple(s[list(b)].tolist()) for b in branches)
            for b, vec in zip(branches, vectors):
                s[list(b)] = vec
        return s[self.group]


def _no_rules(n: int) -> StageReduction:
    return StageReduction(np.arange(n, dtype=np.int64), (), (), (), ())


def stage_reduction(problem: StageProblem, place: bool = True, symmetry: bool = True) -> StageReduction:
    """Merges, placing rules and branch order of ``problem`` (see the module notes).

    Parameters
    ----------
    problem : StageProblem
    place, symmetry : bool
        Also the placing rules; also the order of interchangeable branches.

    Returns
    -------
    StageReduction
        The identity (no rules) for problems of the pipeline model and in training mode.
    """
    g = problem.graph
    n = g.n_nodes
    if problem.weights.stage_time_peak > 0 or problem.memory is not None or problem.training:
        return _no_rules(n)
    ticks = problem.node_ticks
    loadless = g.node_weight_bytes == 0  # a reader of a shared weight decides where it is held
    if problem.weights.compute_peak > 0:
        loadless &= ~ticks.any(axis=1)
    preds: list[dict[int, int]] = [{} for _ in range(n)]
    succs: list[dict[int, int]] = [{} for _ in range(n)]
    for u, v, c in zip(g.src.tolist(), g.dst.tolist(), problem.edge_comm.tolist()):
        preds[v][u] = preds[v].get(u, 0) + c
        succs[u][v] = succs[u].get(v, 0) + c
    group = list(range(n))
    alive = [True] * n
    merges = []
    queue = list(range(n - 1, -1, -1))
    while queue:
        v = queue.pop()
        if not alive[v] or not loadless[v]:
            continue
        net = sum(preds[v].values()) - sum(succs[v].values())
        if len(preds[v]) == 1 and net >= 0:
            t = next(iter(preds[v]))
        elif len(succs[v]) == 1 and net <= 0:
            t = next(iter(succs[v]))
        else:
            continue
        # v's only predecessor (successor) is t, so no other path joins them: contracting keeps a DAG.
        for side, other in ((preds, succs), (succs, preds)):
            for x, c in side[v].items():
                del other[x][v]
                if x != t:
                    side[t][x] = side[t].get(x, 0) + c
                    other[x][t] = other[x].get(t, 0) + c
            side[v] = {}
        alive[v] = False
        group[v] = t
        merges.append((v, t))
        queue += [t, *preds[t], *succs[t]]
    root = np.asarray(group, dtype=np.int64)
    for v in range(n):  # follow each merge chain to its end
        r = v
        while group[r] != r:
            r = group[r]
        root[v] = r
    roots = [v for v in range(n) if alive[v]]
    earliest, latest = [], []
    for v in roots:
        if not loadless[v] or not place:
            continue
        net = sum(preds[v].values()) - sum(succs[v].values())
        if net > 0:
            earliest.append((v, tuple(sorted(preds[v]))))
        elif net < 0:
            latest.append((v, tuple(sorted(succs[v]))))
    classes = _interchangeable_branches(problem, roots, root, preds, succs) if symmetry else ()
    return StageReduction(root, tuple(merges), tuple(earliest), tuple(latest), classes)


def _interchangeable_branches(problem, roots, root, preds, succs):
    """Classes of at least two branches (maximal chains of the contracted graph) that a swap maps
    onto each other: the same predecessors and successors with the same traffic, and position by
    position the same parameters and compute."""
    g = problem.graph
    params = np.zeros(g.n_nodes, dtype=object)
    ticks = np.zeros((g.n_nodes, problem.n_stages), dtype=np.int64)
    np.add.at(ticks, root, problem.node_ticks)
    for v, p in enumerate(g.param_bytes.tolist()):
        params[root[v]] += p
    reads: list[set[int]] = [set() for _ in range(g.n_nodes)]  # shared weights each group reads
    for i, w in enumerate(g.shared_weights):
        for v in w.readers:
            reads[root[v]].add(i)

    def continues(v):  # v's only predecessor has v as its only successor
        return len(preds[v]) == 1 and len(succs[next(iter(preds[v]))]) == 1

    by_signature: dict[tuple, list[tuple[int, ...]]] = {}
    for v in roots:
        if continues(v):
            continue
        chain = [v]
        while len(succs[chain[-1]]) == 1:
            w = next(iter(succs[chain[-1]]))
            if len(preds[w]) != 1:
                break
            chain.append(w)
        key = (tuple(sorted(preds[chain[0]].items())), tuple(sorted(succs[chain[-1]].items())),
               tuple((params[x], tuple(ticks[x].tolist()), tuple(sorted(reads[x]))) for x in chain),
               tuple(succs[a][b] for a, b in zip(chain, chain[1:])))
        by_signature.setdefault(key, []).append(tuple(chain))
    return tuple(tuple(c) for c in by_signature.values() if len(c) > 1)
