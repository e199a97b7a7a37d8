"""Per-process shards (`codesign.distributed.shards`, ``codesign partition``) and the sorted
partition layout (`codesign.distributed.partition._layout`) against the former P x P layout."""

from __future__ import annotations

import dataclasses
import json

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


# ---------------------------------------------------------------- shards


def _toy_graph(n=70, e=400, F=5, C=3, seed=0, weighted=True):
    """A random graph whose last 15 nodes have no edge, with edge weights and a split."""
    import jax.numpy as jnp

    from codesign.graph import Graph
    rng = np.random.default_rng(seed)
    s, r = rng.integers(0, n - 15, e), rng.integers(0, n - 15, e)
    r = np.where(s == r, (r + 1) % (n - 15), r)  # no self-loops (`Graph` refuses them)
    return Graph(senders=jnp.asarray(s, jnp.int32), receivers=jnp.asarray(r, jnp.int32),
                 x=jnp.asarray(rng.normal(size=(n, F)), jnp.float32), y=jnp.asarray(rng.integers(0, C, n), jnp.int32),
                 train_mask=jnp.asarray(rng.random(n) < 0.5), val_mask=jnp.asarray(rng.random(n) < 0.3),
                 test_mask=jnp.asarray(rng.random(n) < 0.3), n_nodes=n,
                 edge_weight=jnp.asarray(rng.random(e) + 0.5, jnp.float32) if weighted else None)


def _write(tmp_path, P, graph=None, method="contiguous", name="toy"):
    from codesign.distributed import partition_graph
    from codesign.distributed.shards import write_shards
    graph = _toy_graph() if graph is None else graph
    part = partition_graph(np.asarray(graph.senders), np.asarray(graph.receivers), graph.n_nodes, P, method)
    out = tmp_path / f"{name}-{P}"
    write_shards(graph, part, out, graph_name=name, seed=0)
    return graph, part, out


def _assert_blocks_equal(got, want):
    assert set(got) == set(want)
    for k in want:
        if k == "send_rows":
            assert len(got[k]) == len(want[k])
            for u, v in zip(got[k], want[k]):
                assert u.dtype == v.dtype and u.shape == v.shape
                np.testing.assert_array_equal(u, v, err_msg=k)
        else:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
            assert got[k].tobytes() == want[k].tobytes(), k  # bit-equal (float32 features and weights included)


@pytest.mark.parametrize("P,weighted", [(1, True), (3, True), (4, False), (8, True)])
def test_shards_round_trip_equal_shard_graph_blocks(tmp_path, P, weighted):
    from codesign.distributed.gcn import graph_blocks
    from codesign.distributed.shards import load_shard, shard_blocks
    graph, part, out = _write(tmp_path, P, _toy_graph(weighted=weighted), method="metis" if P > 1 else "contiguous")
    shards = [load_shard(out, i, n_parts=P, graph="toy") for i in range(P)]
    want = graph_blocks(graph, part)
    _assert_blocks_equal(shard_blocks(shards), want)
    # one process's slice (parts in any order) is the matching rows of the whole
    pick = [P - 1, 0] if P > 1 else [0]
    got = shard_blocks([shards[i] for i in pick])
    _assert_blocks_equal(got, {k: (tuple(v[pick] for v in w) if k == "send_rows" else w[pick])
                               for k, w in want.items()})
    for sh in shards:  # halo lists: the rows sent at step s are the global ids the receiver lists for step s
        p = sh.part_id
        assert sh.edge_offsets == part.edge_offsets and sh.edge_lengths == part.edge_lengths
        for s in range(1, P):
            dst = shards[(p + s) % P]
            n_real = int(sh.halo_send_counts[s - 1])
            assert n_real == dst.halo_recv_counts[s - 1] == part.halo_counts[p, (p + s) % P]
            np.testing.assert_array_equal(sh.node_id[sh.send_rows[s - 1][:n_real]], dst.recv_node_id[s - 1][:n_real])
            assert np.all(dst.recv_node_id[s - 1][n_real:] == -1)
        # every real edge slot: global (sender, receiver) recovered from the shard alone
        s_glob, r_glob = np.asarray(graph.senders), np.asarray(graph.receivers)
        for st in range(P):
            o, L = sh.edge_offsets[st], sh.edge_lengths[st]
            e = sh.edge_id[o:o + L]
            real = e >= 0
            snd = sh.senders[o:o + L][real]
            got_s = sh.node_id[snd] if st == 0 else sh.recv_node_id[st - 1][snd]
            np.testing.assert_array_equal(got_s, s_glob[e[real]])
            np.testing.assert_array_equal(sh.node_id[sh.receivers[o:o + L][real]], r_glob[e[real]])


def test_shard_graph_is_graph_blocks_on_one_device():
    import jax

    from codesign import distributed as dist
    from codesign.distributed.gcn import graph_blocks
    graph = _toy_graph()
    part = dist.partition_graph(np.asarray(graph.senders), np.asarray(graph.receivers), graph.n_nodes, 1)
    sg = dist.shard_graph(graph, part, dist.make_mesh(1))
    want = graph_blocks(graph, part)
    got = {k: np.asarray(jax.device_get(getattr(sg, k))) for k in want if k != "send_rows"}
    got["send_rows"] = ()
    _assert_blocks_equal(got, want)
    assert (sg.offsets, sg.lengths, sg.n_nodes, sg.n_edges) == (part.edge_offsets, part.edge_lengths,
                                                                 graph.n_nodes, graph.n_edges)


@pytest.mark.parametrize("P", [1, 4])
def test_manifest_gives_the_layout_sizes_and_locality_of_the_whole(tmp_path, P):
    """What a process that reads only its part needs of the others comes from the manifest alone:
    the partition's sizes (`read_layout` equals `Partition.layout`, field by field and in its
    record summary), the graph's sizes and its locality profile (bit-equal to measuring it)."""
    import dataclasses

    from codesign.distributed.shards import graph_sizes, read_layout, read_locality
    from codesign.hwmodel import measure_locality
    graph, part, out = _write(tmp_path, P, method="metis" if P > 1 else "contiguous")
    got, want = read_layout(out), part.layout
    for f in dataclasses.fields(want):
        a, b = getattr(got, f.name), getattr(want, f.name)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f.name)
    assert json.dumps(got.summary()) == json.dumps(want.summary())
    assert graph.signed_features  # normal features
    assert graph_sizes(out) == (graph.n_nodes, graph.n_edges, graph.n_features, graph.n_classes, True)
    # the input quantizer's grid follows the whole graph, the same in every process
    _, _, out_abs = _write(tmp_path, P, graph.replace(x=np.abs(np.asarray(graph.x))), name="abs")
    assert graph_sizes(out_abs).signed_features is False
    loc, ref = read_locality(out), measure_locality(graph.senders, graph.receivers, graph.n_nodes)
    for f in dataclasses.fields(ref):
        a, b = getattr(loc, f.name), getattr(ref, f.name)
        assert (a is None) == (b is None), f.name
        if b is not None:
            assert np.asarray(a).tobytes() == np.asarray(b, np.float32).tobytes(), f.name


def test_feature_nnz_is_the_graphs_and_a_bad_field_is_refused_in_one_line(tmp_path):
    """The manifest's per-column nonzeros are the whole graph's (what a process pricing the CSR
    feature store from its own part needs); a wrong length, a negative count or a string is
    refused naming the file and the field."""
    from codesign.distributed.shards import MANIFEST, ShardError, read_feature_nnz
    from codesign.graph import feature_column_nnz
    graph, _, out = _write(tmp_path, 2)
    np.testing.assert_array_equal(read_feature_nnz(out), np.asarray(feature_column_nnz(graph.x), np.float32))
    path = out / MANIFEST
    good = json.loads(path.read_text())
    for bad in (good["feature_nnz"][:-1], [-1.0] + good["feature_nnz"][1:], ["7"] + good["feature_nnz"][1:],
                [True] + good["feature_nnz"][1:], None):
        path.write_text(json.dumps({**good, "feature_nnz": bad}))
        with pytest.raises(ShardError, match=r"manifest\.json: field 'feature_nnz' must list n_features=\d+ "
                                             r"non-negative counts$"):
            read_feature_nnz(out)


def test_load_local_equals_shard_graph_on_one_device(tmp_path):
    import jax

    from codesign import distributed as dist
    graph, part, out = _write(tmp_path, 1)
    mesh = dist.make_mesh(1)
    sg, valid = dist.load_local(out, mesh)
    want = dist.shard_graph(graph, part, mesh)
    for k in ("x", "y", "train_mask", "val_mask", "test_mask", "node_id", "senders", "receivers", "weight"):
        assert np.asarray(jax.device_get(getattr(sg, k))).tobytes() == np.asarray(jax.device_get(getattr(want, k))).tobytes(), k
    np.testing.assert_array_equal(np.asarray(valid), np.asarray(dist.edge_slot_mask(part, mesh)))
    with pytest.raises(dist.ShardError, match=r"field 'n_parts' is 1, expected 2$"):
        dist.load_local(_write(tmp_path, 1, name="other")[2], _FakeMesh(2))


class _FakeMesh:
    """A mesh of ``n`` devices for the P check only (this process has one device)."""

    def __init__(self, n):
        self.devices = np.empty(n, object)


def test_a_format_1_folder_is_refused_in_one_line(tmp_path):
    from codesign.distributed.shards import MANIFEST, ShardError, read_layout
    _, _, out = _write(tmp_path, 2, method="metis")
    m = json.loads((out / MANIFEST).read_text())
    m["format"] = "codesign-shards/1"
    for k in ("n_classes", "halo_counts", "edges_per_part", "locality"):
        del m[k]
    (out / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardError, match=r"manifest\.json: field 'format' is 'codesign-shards/1', this code reads "
                                         r"'codesign-shards/4' \(write the folder again with codesign partition\)$"):
        read_layout(out)


def test_load_shard_reads_only_its_part(tmp_path):
    from codesign.distributed.shards import ShardError, load_shard, part_file
    _, _, out = _write(tmp_path, 3)
    (out / part_file(1)).unlink()
    (out / part_file(2)).write_bytes(b"garbage")
    assert load_shard(out, 0).part_id == 0
    with pytest.raises(ShardError, match=r"part-00001\.npz: missing"):
        load_shard(out, 1)
    with pytest.raises(ShardError, match=r"part-00002\.npz: field 'sha256' does not match"):
        load_shard(out, 2)


def _one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_load_shard_refuses_tampered_mismatched_and_missing(tmp_path):
    from codesign.distributed.shards import FORMAT, MANIFEST, ShardError, load_shard, part_file
    _, _, out = _write(tmp_path, 3)
    _, _, other = _write(tmp_path, 2)
    assert issubclass(ShardError, ValueError)
    with pytest.raises(ShardError) as e:  # a flipped byte
        data = bytearray((out / part_file(1)).read_bytes())
        data[len(data) // 2] ^= 1
        (out / part_file(1)).write_bytes(bytes(data))
        load_shard(out, 1)
    assert "part-00001.npz: field 'sha256'" in _one_line(e)
    with pytest.raises(ShardError, match="field 'n_parts' is 3, expected 4"):
        load_shard(out, 0, n_parts=4)
    with pytest.raises(ShardError, match="field 'graph' is 'toy', expected 'cora'"):
        load_shard(out, 0, graph="cora")
    with pytest.raises(ShardError, match=r"part_id must be an int in \[0, 3\)"):
        load_shard(out, 3)
    from codesign.distributed import partition_graph, write_shards
    with pytest.raises(ValueError, match="partition is for 70 nodes / 400 edges, graph has 70 / 300"):
        g = _toy_graph(e=300)
        write_shards(g, partition_graph(np.zeros(400, int), np.ones(400, int), 70, 2), tmp_path / "x", graph_name="x")
    # another partition's file under this name, its hash written into the manifest: its header says so
    m = json.loads((out / MANIFEST).read_text())
    (out / part_file(0)).write_bytes((other / part_file(0)).read_bytes())
    m["parts"][0]["sha256"] = json.loads((other / MANIFEST).read_text())["parts"][0]["sha256"]
    (out / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardError) as e:
        load_shard(out, 0)
    assert "part-00000.npz: field 'n_parts' is 2, the manifest says 3" in _one_line(e)
    m["format"] = "codesign-shards/0"
    (out / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardError, match="manifest.json: field 'format'"):
        load_shard(out, 2)
    m["format"] = FORMAT
    del m["parts"]
    (out / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardError, match="manifest.json: field 'parts' missing"):
        load_shard(out, 2)
    (out / MANIFEST).write_text("{")
    with pytest.raises(ShardError, match="manifest.json: unreadable"):
        load_shard(out, 2)
    (out / MANIFEST).unlink()
    with pytest.raises(ShardError, match="manifest.json: missing"):
        load_shard(out, 2)
    with pytest.raises(ShardError, match="part 1 has n_parts=3, part 0 has 2"):
        from codesign.distributed.shards import shard_blocks
        _, _, out3 = _write(tmp_path, 3, name="fresh")
        shard_blocks([load_shard(other, 0), load_shard(out3, 1)])


def test_write_shards_is_atomic_and_leaves_no_temporaries(tmp_path, monkeypatch):
    import os

    from codesign.distributed import shards
    graph, part, out = _write(tmp_path, 3)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real, calls = os.replace, []

    def failing(src, dst):  # the second rename fails (a full disk, a kill): nothing half-written remains
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        real(src, dst)
    monkeypatch.setattr(shards.os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        shards.write_shards(graph, part, out, graph_name="renamed", seed=1)
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # the temporary was removed
    assert (out / "manifest.json").read_bytes() == before["manifest.json"]  # the manifest is written last
    assert shards.load_shard(out, 2, graph="toy").part_id == 2


def test_cli_partition_round_trip_and_tampered_file(tmp_path, capsys, cora, planetoid_root):
    import json

    from codesign import cli
    from codesign.distributed import partition_graph
    from codesign.distributed.gcn import graph_blocks
    from codesign.distributed.shards import load_shard, part_file, shard_blocks
    out = tmp_path / "cora-3"
    assert cli.main(["partition", "cora", "--parts", "3", "--out", str(out), "--data-root", str(planetoid_root),
                     "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_parts"] == 3 and summary["graph"] == "cora" and summary["method"] == "metis"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"] + [part_file(i) for i in range(3)]
    part = partition_graph(np.asarray(cora.senders), np.asarray(cora.receivers), cora.n_nodes, 3, "metis", seed=0)
    _assert_blocks_equal(shard_blocks([load_shard(out, i, n_parts=3, graph="cora") for i in range(3)]),
                         graph_blocks(cora, part))
    assert cli.main(["partition", "--check", str(out)]) == 0
    assert "(all verified)" in capsys.readouterr().out
    data = bytearray((out / part_file(2)).read_bytes())
    data[-100] ^= 0xFF
    (out / part_file(2)).write_bytes(bytes(data))
    assert cli.main(["partition", "--check", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("codesign partition: error: ")
    assert f"{out / part_file(2)}: field 'sha256' does not match" in err
    assert cli.main(["partition", "cora", "--out", str(out)]) == 2
    assert "argument --parts: required" in capsys.readouterr().err
