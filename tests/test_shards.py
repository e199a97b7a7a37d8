"""Per-process shards (`codesign.distributed.shards`, ``codesign partition``) and the sorted
partition layout (`codesign.distributed.partition._layout`) against the former P x P layout."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from codesign.distributed import partition as partition_mod


def _layout_reference(s, r, n_nodes, n_parts, part, method):
    """The former ``_layout`` (P x P boolean masks over all edges, O(P^2 E)), kept as the reference."""
    P = n_parts
    order = np.lexsort((np.arange(n_nodes), part))
    n_local = np.bincount(part, minlength=P).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(n_local)[:-1]])
    local_row = np.empty(n_nodes, np.int32)
    local_row[order] = np.arange(n_nodes) - np.repeat(starts, n_local)
    B = max(int(n_local.max()), 1)
    node_id = np.full((P, B), -1, np.int32)
    node_id[part[order], local_row[order]] = order
    ps, pr = part[s], part[r]
    step = (pr - ps) % P
    send_rows, halo_counts = [], np.zeros((P, P), np.int64)
    halo_slot = np.zeros(s.shape[0], np.int64)
    for st in range(1, P):
        sel = np.flatnonzero(step == st)
        per_q = []
        for q in range(P):
            e_q = sel[ps[sel] == q]
            rows, inv = np.unique(local_row[s[e_q]], return_inverse=True)
            halo_slot[e_q] = inv
            halo_counts[q, (q + st) % P] = rows.size
            per_q.append(rows)
        h = max(max(len(x) for x in per_q), 0)
        buf = np.zeros((P, h), np.int32)
        for q, rows in enumerate(per_q):
            buf[q, :len(rows)] = rows
        send_rows.append(buf)
    lengths = [int(max(np.sum((pr == p) & (step == st)) for p in range(P))) for st in range(P)]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int)
    S = max(int(sum(lengths)), 1)
    snd, rcv, eid = np.zeros((P, S), np.int32), np.zeros((P, S), np.int32), np.full((P, S), -1, np.int32)
    src_row = np.where(step == 0, local_row[s], halo_slot)
    for p in range(P):
        for st in range(P):
            e = np.flatnonzero((pr == p) & (step == st))
            o = offsets[st]
            snd[p, o:o + e.size] = src_row[e]
            rcv[p, o:o + e.size] = local_row[r[e]]
            eid[p, o:o + e.size] = e
    return partition_mod.Partition(P, n_nodes, int(s.shape[0]), part, local_row, node_id, n_local, B,
                                   tuple(send_rows), halo_counts, tuple(int(o) for o in offsets), tuple(lengths),
                                   snd, rcv, eid, int(np.sum(ps != pr)), method)


def _assert_same_partition(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "send_rows":
            assert len(x) == len(y), f.name
            for i, (u, v) in enumerate(zip(x, y)):
                assert u.dtype == v.dtype and u.shape == v.shape, (f.name, i, u.shape, v.shape)
                np.testing.assert_array_equal(u, v, err_msg=f"{f.name}[{i}]")
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, (f.name, x.dtype, y.dtype, x.shape, y.shape)
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert type(x) is type(y) and x == y, (f.name, x, y)
            if isinstance(x, tuple):
                assert all(type(u) is int for u in x), f.name


def _graph_cases():
    rng = np.random.default_rng(7)
    cases = []
    for n, e, P in ((60, 300, 1), (60, 300, 2), (60, 300, 5), (200, 900, 8), (40, 0, 3), (1, 0, 1), (1, 3, 1)):
        cases.append((f"random n={n} e={e} P={P}", rng.integers(0, n, e), rng.integers(0, n, e), n, P))
    # isolated nodes: edges among the first 10 of 50 nodes only; P = 12 > the 10 nodes with edges
    cases.append(("isolated P>nodes-with-edges", rng.integers(0, 10, 80), rng.integers(0, 10, 80), 50, 12))
    # every node its own part (P = N), self-loops and duplicate edges included
    s = np.concatenate([rng.integers(0, 16, 100), np.arange(16), [3, 3, 3]])
    cases.append(("P=N with self-loops and duplicates", s, np.concatenate([rng.integers(0, 16, 100), np.arange(16),
                                                                          [5, 5, 5]]), 16, 16))
    return cases


@pytest.mark.parametrize("name,s,r,n,P", _graph_cases(), ids=[c[0] for c in _graph_cases()])
@pytest.mark.parametrize("how", ["random", "contiguous", "metis"])
def test_sorted_layout_equals_reference(name, s, r, n, P, how):
    s, r = np.asarray(s, np.int64), np.asarray(r, np.int64)
    rng = np.random.default_rng(P)
    if how == "random":  # unbalanced, some parts possibly empty
        part = rng.integers(0, P, n).astype(np.int32)
        got = partition_mod.partition_graph(s, r, n, P, parts=part)
    else:
        if how == "metis" and P > 1:
            pytest.importorskip("pymetis")
        got = partition_mod.partition_graph(s, r, n, P, method=how)
        part = got.part
    _assert_same_partition(got, _layout_reference(s, r, n, P, part, got.method))
