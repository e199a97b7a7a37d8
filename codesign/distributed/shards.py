"""Per-process shards: a partitioned graph written once, offline, one file per part, so that each
process of a multi-process run reads only its own part (its memory is its shard's, not the graph's).

A shard folder (``codesign partition GRAPH --parts P --out DIR``, or `write_shards`) holds

* ``part-00000.npz`` ... one per part (`SHARD_ARRAYS`, numpy ``.npz`` without pickles), and
* ``manifest.json``: ``format`` (`FORMAT`), ``code_version``, ``graph`` (name), ``graph_sha256``
  (`codesign.checkpoint.graph_sha256`), ``n_nodes``, ``n_edges``, ``n_features``, ``n_classes``,
  ``n_parts``, ``method``, ``seed``, ``block_size``, ``edge_offsets``, ``edge_lengths``,
  ``halo_sizes``, ``halo_counts`` ([P][P]: real rows part q sends to part p), ``edges_per_part``,
  ``edge_cut``, ``locality`` (the whole graph's `codesign.hwmodel.LocalityProfile`, lists of
  float32 values, which the cost model reads), ``feature_nnz`` (the whole graph's nonzeros per
  input column, `codesign.graph.feature_column_nnz`: the cost model's CSR feature store) and
  ``parts``: per part ``{"file", "sha256", "n_local"}``. Format 2 added ``n_classes``,
  ``halo_counts``, ``edges_per_part`` and ``locality``, format 3 ``feature_nnz``: what a process
  that trains from its own part needs of the others (`read_layout`, `graph_sizes`,
  `read_locality`, `read_feature_nnz`, `load_local`).

Numbering inside part ``p`` is the `codesign.distributed.Partition` layout: local rows ``0 ..
n_local-1`` (its nodes, ascending global id); a step-``s`` edge's sender indexes the halo buffer
received at ring step ``s`` (from part ``(p - s) % P``). `load_shard` checks the file's SHA-256
against the manifest and the file's own header against the manifest and the caller's
expectations; `shard_blocks` turns loaded shards into the per-part arrays of
`codesign.distributed.ShardedGraph` (equal to `codesign.distributed.gcn.graph_blocks` of the whole
graph), e.g. for ``jax.make_array_from_process_local_data``.

Every file is written to a temporary name beside it and renamed into place (`os.replace`); the
manifest is written last.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import uuid
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import numpy as np

from codesign.distributed.partition import Partition, PartitionLayout
from codesign.graph import Graph, feature_column_nnz

FORMAT = "codesign-shards/4"
"""Format name and version of a shard folder (manifest ``format``, each file's ``format``; 4: the
manifest says whether any feature is negative, ``signed_features``)."""

MANIFEST = "manifest.json"

SHARD_ARRAYS = ("node_id", "x", "y", "train_mask", "val_mask", "test_mask", "senders", "receivers", "edge_id",
                "weight", "send_rows", "recv_node_id", "halo_send_counts", "halo_recv_counts")
"""The arrays of a part file (besides its header; shapes in `Shard`)."""

_HEADER = ("format", "graph_sha256", "part_id", "n_parts", "n_nodes", "n_edges", "block_size")

__all__ = ["FORMAT", "MANIFEST", "SHARD_ARRAYS", "Shard", "ShardError", "GraphSizes", "part_file", "write_shards",
           "read_manifest", "load_shard", "shard_blocks", "read_layout", "graph_sizes", "read_locality", "read_feature_nnz",
           "load_local"]


class ShardError(ValueError):
    """A shard folder that cannot be used: a missing, unreadable, tampered or mismatched file. The
    message is one line naming the file and the field (a `ValueError`: the CLI reports it as bad
    input)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Shard:
    """Part ``part_id`` of a P-way partitioned graph, as one process loads it (numpy, host).

    Fields (n = n_local, F features, S edge slots, H_s padded halo rows of step s = 1..P-1):
      part_id, n_parts: p, P.
      n_nodes, n_edges: N, E of the whole graph.
      block_size: B (rows of every part's block, >= n).
      edge_offsets, edge_lengths: int tuples of length P, the slot range of each step.
      node_id: int32 [n]  global id of each local row (ascending).
      x: float32 [n, F]; y: int32 [n]; train_mask, val_mask, test_mask: bool [n].
      senders: int32 [S]  per slot: a local row (step 0) or a row of step s's received halo buffer.
      receivers: int32 [S]  local row of each slot's receiver (0 on padding).
      edge_id: int32 [S]  global edge index of each slot (-1 on padding).
      weight: float32 [S]  edge weight (1 where the graph has none; 0 on padding).
      send_rows: tuple of P-1 int32 [H_s]  local rows sent at step s (to part (p + s) % P),
        ascending, padded with row 0.
      recv_node_id: tuple of P-1 int32 [H_s]  global id of each row received at step s (from part
        (p - s) % P); -1 on padding.
      halo_send_counts, halo_recv_counts: int64 [P-1]  real rows sent / received at step s.
      manifest: the folder's manifest (dict).
    """

    part_id: int
    n_parts: int
    n_nodes: int
    n_edges: int
    block_size: int
    edge_offsets: tuple
    edge_lengths: tuple
    node_id: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    senders: np.ndarray
    receivers: np.ndarray
    edge_id: np.ndarray
    weight: np.ndarray
    send_rows: tuple
    recv_node_id: tuple
    halo_send_counts: np.ndarray
    halo_recv_counts: np.ndarray
    manifest: dict

    @property
    def n_local(self) -> int:
        """n, real rows of this part."""
        return int(self.node_id.shape[0])


class GraphSizes(NamedTuple):
    """The sizes of a graph that a partitioned GCN reads (`codesign.train.build_model`), for a
    process that never loads the graph (`graph_sizes`), and whether any of its features is negative
    (`codesign.graph.Graph.signed_features`: the input quantizer's grid, the same in every process)."""

    n_nodes: int
    n_edges: int
    n_features: int
    n_classes: int
    signed_features: bool


def part_file(part_id: int) -> str:
    """File name of part ``part_id`` inside a shard folder (``part-00003.npz``)."""
    return f"part-{part_id:05d}.npz"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _concat(arrays, dtype) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype) for a in arrays]) if arrays else np.zeros(0, dtype)


def write_shards(graph: Graph, part: Partition, out_dir, *, graph_name: str, seed: Optional[int] = None) -> dict:
    """Writes ``graph`` in ``part``'s layout as one ``.npz`` per part plus ``manifest.json`` into
    ``out_dir`` (created if missing; files of an earlier write there are replaced).

    Args:
      graph: the whole graph (`Graph`; ``edge_weight`` None means weight 1).
      part: its `Partition` (`codesign.distributed.partition_graph`).
      out_dir: folder to write.
      graph_name: the graph's name, recorded in the manifest (e.g. a `codesign.data.DATASETS` name).
      seed: the partitioner's seed, recorded (None: not applicable).

    Returns:
      The manifest (dict, as written).

    Raises:
      ValueError: the partition was built for another graph (node or edge count).
      OSError: the folder or a file cannot be written.
    """
    from codesign.checkpoint import graph_sha256
    from codesign.distributed.gcn import graph_blocks
    from codesign.results import code_version
    blocks = graph_blocks(graph, part)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    P, g_sha = part.n_parts, graph_sha256(graph)
    header = dict(format=FORMAT, graph_sha256=g_sha, n_parts=P, n_nodes=part.n_nodes, n_edges=part.n_edges,
                  block_size=part.block_size)
    parts = []
    for p in range(P):
        n = int(part.n_local[p])
        steps = range(1, P)
        src = [(p - s) % P for s in steps]
        recv = []
        for s, q in zip(steps, src):
            ids = part.node_id[q][part.send_rows[s - 1][q]]
            ids[part.halo_counts[q, p]:] = -1
            recv.append(ids)
        arrays = dict(
            node_id=part.node_id[p, :n], x=blocks["x"][p, :n], y=blocks["y"][p, :n],
            train_mask=blocks["train_mask"][p, :n], val_mask=blocks["val_mask"][p, :n],
            test_mask=blocks["test_mask"][p, :n], senders=part.senders[p], receivers=part.receivers[p],
            edge_id=part.edge_id[p], weight=blocks["weight"][p],
            send_rows=_concat([r[p] for r in part.send_rows], np.int32), recv_node_id=_concat(recv, np.int32),
            halo_send_counts=np.array([part.halo_counts[p, (p + s) % P] for s in steps], np.int64),
            halo_recv_counts=np.array([part.halo_counts[q, p] for q in src], np.int64))
        buf = io.BytesIO()
        np.savez(buf, **arrays, **{f"header_{k}": np.asarray(v) for k, v in {**header, "part_id": p}.items()})
        data = buf.getvalue()
        _write_atomic(out / part_file(p), data)
        parts.append({"file": part_file(p), "sha256": _sha256(data), "n_local": n})
    from codesign.hwmodel import measure_locality
    locality = measure_locality(graph.senders, graph.receivers, graph.n_nodes)
    manifest = dict(format=FORMAT, code_version=code_version(), graph=graph_name, graph_sha256=g_sha,
                    n_nodes=part.n_nodes, n_edges=part.n_edges, n_features=int(blocks["x"].shape[-1]),
                    n_classes=int(graph.n_classes), signed_features=graph.signed_features, n_parts=P,
                    method=part.method, seed=seed,
                    block_size=part.block_size, edge_offsets=[int(v) for v in part.edge_offsets],
                    edge_lengths=[int(v) for v in part.edge_lengths], halo_sizes=list(part.halo_sizes),
                    halo_counts=np.asarray(part.halo_counts, np.int64).tolist(),
                    edges_per_part=list(part.edges_per_part), edge_cut=int(part.edge_cut),
                    locality={f.name: (None if getattr(locality, f.name) is None
                                       else np.asarray(getattr(locality, f.name), np.float32).tolist())
                              for f in dataclasses.fields(locality)},
                    feature_nnz=np.asarray(feature_column_nnz(graph.x), np.float32).tolist(),
                    parts=parts)
    _write_atomic(out / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


_MANIFEST_FIELDS = ("format", "graph", "graph_sha256", "n_nodes", "n_edges", "n_features", "n_classes",
                    "signed_features", "n_parts",
                    "method", "block_size", "edge_offsets", "edge_lengths", "halo_sizes", "halo_counts",
                    "edges_per_part", "edge_cut", "locality", "feature_nnz", "parts")


def read_manifest(shard_dir) -> dict:
    """The manifest (dict) of shard folder ``shard_dir``, checked for its fields and format.

    Raises:
      ShardError: ``<dir>/manifest.json: ...``, the file missing, unreadable, not JSON, of another
        format, or without a field (named).
    """
    path = Path(shard_dir) / MANIFEST
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardError(f"{path}: missing (not a shard folder: write one with codesign partition)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ShardError(f"{path}: unreadable ({type(e).__name__}: {e})".replace("\n", " ")) from None
    if not isinstance(m, dict):
        raise ShardError(f"{path}: not a JSON object")
    if m.get("format") != FORMAT:  # first: an older folder lacks newer fields (write it again)
        raise ShardError(f"{path}: field 'format' is {m.get('format')!r}, this code reads {FORMAT!r} (write the "
                         "folder again with codesign partition)")
    for k in _MANIFEST_FIELDS:
        if k not in m:
            raise ShardError(f"{path}: field {k!r} missing")
    if not isinstance(m["parts"], list) or len(m["parts"]) != m["n_parts"]:
        raise ShardError(f"{path}: field 'parts' must list n_parts={m['n_parts']} files")
    return m


def load_shard(shard_dir, part_id: int, *, n_parts: Optional[int] = None, graph: Optional[str] = None) -> Shard:
    """Part ``part_id`` of shard folder ``shard_dir``: reads ``manifest.json`` and that part's file
    only, after checking the file's SHA-256 against the manifest and its header (format, graph
    hash, part id, P, N, E, B) against the manifest.

    Args:
      shard_dir: a folder written by `write_shards` (``codesign partition``).
      part_id: p in [0, P).
      n_parts: the P this process expects (None: any); a folder for another P is refused.
      graph: the graph name this process expects (None: any); a folder for another graph is refused.

    Returns:
      `Shard`.

    Raises:
      ShardError (a ValueError), one line naming the file and the field: the manifest's errors
        (`read_manifest`); ``part_id`` out of range; ``n_parts`` / ``graph`` other than the
        manifest's; the part file missing or unreadable, its SHA-256 not the manifest's
        (tampered or replaced), its header or an array's shape not matching the manifest.
    """
    m = read_manifest(shard_dir)
    mpath = Path(shard_dir) / MANIFEST
    P = m["n_parts"]
    if n_parts is not None and n_parts != P:
        raise ShardError(f"{mpath}: field 'n_parts' is {P}, expected {n_parts}")
    if graph is not None and graph != m["graph"]:
        raise ShardError(f"{mpath}: field 'graph' is {m['graph']!r}, expected {graph!r}")
    if isinstance(part_id, bool) or not isinstance(part_id, (int, np.integer)) or not 0 <= part_id < P:
        raise ShardError(f"{mpath}: part_id must be an int in [0, {P}), got {part_id!r}")
    entry = m["parts"][part_id]
    if not isinstance(entry, dict) or not {"file", "sha256", "n_local"} <= set(entry):
        raise ShardError(f"{mpath}: field 'parts[{part_id}]' must hold file, sha256 and n_local")
    path = Path(shard_dir) / entry["file"]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ShardError(f"{path}: missing (part {part_id} of {mpath})") from None
    except OSError as e:
        raise ShardError(f"{path}: unreadable ({e})") from None
    if _sha256(data) != entry["sha256"]:
        raise ShardError(f"{path}: field 'sha256' does not match {mpath} (file changed or from another partition)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise ShardError(f"{path}: unreadable npz ({e})".replace("\n", " ")) from None
    for k in _HEADER + SHARD_ARRAYS:
        if (f"header_{k}" if k in _HEADER else k) not in arrays:
            raise ShardError(f"{path}: field {k!r} missing")
    head = {k: arrays.pop(f"header_{k}").item() for k in _HEADER}
    want = {"format": FORMAT, "part_id": part_id, **{k: m[k] for k in _HEADER if k not in ("format", "part_id")}}
    for k, v in want.items():
        if head[k] != v:
            raise ShardError(f"{path}: field {k!r} is {head[k]!r}, the manifest says {v!r}")
    n, S = entry["n_local"], sum(m["edge_lengths"]) or 1
    halo = m["halo_sizes"]
    shapes = dict(node_id=(n,), x=(n, m["n_features"]), y=(n,), train_mask=(n,), val_mask=(n,), test_mask=(n,),
                  senders=(S,), receivers=(S,), edge_id=(S,), weight=(S,), send_rows=(sum(halo),),
                  recv_node_id=(sum(halo),), halo_send_counts=(P - 1,), halo_recv_counts=(P - 1,))
    for k, shape in shapes.items():
        if arrays[k].shape != shape:
            raise ShardError(f"{path}: field {k!r} has shape {arrays[k].shape}, the manifest implies {shape}")
    cuts = np.cumsum(halo)[:-1] if halo else []
    split = lambda a: tuple(np.split(a, cuts)) if halo else ()
    return Shard(part_id=int(part_id), n_parts=P, n_nodes=m["n_nodes"], n_edges=m["n_edges"],
                 block_size=m["block_size"], edge_offsets=tuple(m["edge_offsets"]),
                 edge_lengths=tuple(m["edge_lengths"]),
                 **{k: arrays[k] for k in SHARD_ARRAYS if k not in ("send_rows", "recv_node_id")},
                 send_rows=split(arrays["send_rows"]), recv_node_id=split(arrays["recv_node_id"]), manifest=m)


def shard_blocks(shards: Sequence[Shard]) -> dict:
    """The `codesign.distributed.ShardedGraph` arrays of the given parts (one process's slice), as
    numpy with a leading axis of ``len(shards)`` in the given order; all parts' blocks stacked in
    part order equal `codesign.distributed.gcn.graph_blocks` of the whole graph, bit for bit.

    Returns:
      dict: ``x`` float32 [k, B, F]; ``y`` int32 [k, B]; ``train_mask``, ``val_mask``,
      ``test_mask`` bool [k, B] (False on padding rows); ``node_id`` int32 [k, B] (-1 padding);
      ``senders``, ``receivers`` int32 [k, S]; ``weight`` float32 [k, S]; ``send_rows`` tuple of
      P-1 int32 [k, H_s]. The static fields of `ShardedGraph` (``offsets``, ``lengths``,
      ``n_nodes``, ``n_edges``) are the shards' ``edge_offsets``, ``edge_lengths``, ``n_nodes``,
      ``n_edges``.

    Raises:
      ShardError: no shards, or shards of different folders (manifest graph hash, P or layout).
    """
    if not shards:
        raise ShardError("shard_blocks: no shards given")
    ref = shards[0]
    for sh in shards[1:]:
        for k in ("n_parts", "n_nodes", "n_edges", "block_size", "edge_offsets", "edge_lengths"):
            if getattr(sh, k) != getattr(ref, k):
                raise ShardError(f"shard_blocks: part {sh.part_id} has {k}={getattr(sh, k)!r}, part {ref.part_id} "
                                 f"has {getattr(ref, k)!r}")
        if sh.manifest["graph_sha256"] != ref.manifest["graph_sha256"]:
            raise ShardError(f"shard_blocks: part {sh.part_id} is of another graph (graph_sha256) than part "
                             f"{ref.part_id}")
    B = ref.block_size

    def rows(name, fill):
        first = getattr(ref, name)
        out = np.full((len(shards), B) + first.shape[1:], fill, first.dtype)
        for i, sh in enumerate(shards):
            out[i, :sh.n_local] = getattr(sh, name)
        return out

    return dict(x=rows("x", 0), y=rows("y", 0), train_mask=rows("train_mask", False),
                val_mask=rows("val_mask", False), test_mask=rows("test_mask", False), node_id=rows("node_id", -1),
                senders=np.stack([sh.senders for sh in shards]), receivers=np.stack([sh.receivers for sh in shards]),
                weight=np.stack([sh.weight for sh in shards]),
                send_rows=tuple(np.stack([sh.send_rows[s] for sh in shards]) for s in range(ref.n_parts - 1)))


def read_layout(shard_dir) -> PartitionLayout:
    """The `PartitionLayout` of shard folder ``shard_dir``, from its manifest alone (equal to
    ``Partition.layout`` of the partition it was written from).

    Raises:
      ShardError: as `read_manifest`, or a ``halo_counts`` / ``edges_per_part`` / ``parts`` entry
        of the wrong size (one line naming the field).
    """
    m = read_manifest(shard_dir)
    path, P = Path(shard_dir) / MANIFEST, m["n_parts"]
    halo = np.asarray(m["halo_counts"], np.int64)
    if halo.shape != (P, P):
        raise ShardError(f"{path}: field 'halo_counts' must be [{P}][{P}], got shape {list(halo.shape)}")
    if len(m["edges_per_part"]) != P:
        raise ShardError(f"{path}: field 'edges_per_part' must list {P} counts")
    return PartitionLayout(n_parts=P, n_nodes=m["n_nodes"], n_edges=m["n_edges"], block_size=m["block_size"],
                           n_local=tuple(int(e["n_local"]) for e in m["parts"]), halo_counts=halo,
                           halo_sizes=tuple(m["halo_sizes"]), edge_offsets=tuple(m["edge_offsets"]),
                           edge_lengths=tuple(m["edge_lengths"]), edge_slots=sum(m["edge_lengths"]) or 1,
                           edges_per_part=tuple(m["edges_per_part"]), edge_cut=m["edge_cut"], method=m["method"])


def graph_sizes(shard_dir) -> GraphSizes:
    """N, E, F, classes and feature sign of the graph a shard folder was cut from (`GraphSizes`)."""
    m = read_manifest(shard_dir)
    return GraphSizes(m["n_nodes"], m["n_edges"], m["n_features"], m["n_classes"], bool(m["signed_features"]))


def read_locality(shard_dir):
    """The whole graph's `codesign.hwmodel.LocalityProfile` as written in the manifest (float32,
    equal to `codesign.hwmodel.measure_locality` of the graph)."""
    import jax.numpy as jnp

    from codesign.hwmodel import LocalityProfile
    m = read_manifest(shard_dir)
    names = {f.name for f in dataclasses.fields(LocalityProfile)}
    if not isinstance(m["locality"], dict) or set(m["locality"]) != names:
        raise ShardError(f"{Path(shard_dir) / MANIFEST}: field 'locality' must hold {sorted(names)}")
    return LocalityProfile(**{k: None if v is None else jnp.asarray(v, jnp.float32) for k, v in m["locality"].items()})


def read_feature_nnz(shard_dir) -> np.ndarray:
    """float32 [n_features]: the whole graph's nonzeros per input column as written in the
    manifest (`codesign.graph.feature_column_nnz` of the graph), so that a process training from
    its own part prices the CSR feature store as one that holds the graph.

    Raises:
      ShardError: the field is not a list of ``n_features`` non-negative numbers.
    """
    m = read_manifest(shard_dir)
    v = m["feature_nnz"]
    if not isinstance(v, list) or len(v) != m["n_features"] or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in v):
        raise ShardError(f"{Path(shard_dir) / MANIFEST}: field 'feature_nnz' must list n_features={m['n_features']} "
                         "non-negative counts")
    return np.asarray(v, np.float32)


def load_local(shard_dir, mesh):
    """This process's parts of shard folder ``shard_dir`` on ``mesh``: reads the manifest and the
    files of the parts at this process's mesh positions (`codesign.distributed.local_parts`), no
    other file.

    Returns:
      ``(sg, edge_valid)``: the `codesign.distributed.ShardedGraph` and the bool [P, S] real-slot
      mask, both sharded along P (the arrays `shard_graph` and `edge_slot_mask` give on the whole
      graph, bit for bit).

    Raises:
      ShardError: a folder for another number of parts than the mesh's devices, or any error of
        `load_shard`.
    """
    from codesign.distributed.gcn import array_from_parts, block_of, sharded_graph_from_parts
    from codesign.distributed.mesh import local_parts
    P, n_parts = mesh.devices.size, read_manifest(shard_dir)["n_parts"]
    if n_parts != P:  # before the mesh is asked for this process's parts
        raise ShardError(f"{Path(shard_dir) / MANIFEST}: field 'n_parts' is {n_parts}, expected {P}")
    mine = {p: load_shard(shard_dir, p, n_parts=P) for p in local_parts(mesh)}
    first = mine[min(mine)]
    sg = sharded_graph_from_parts(mesh, lambda p: block_of(shard_blocks([mine[p]]), 0), offsets=first.edge_offsets,
                                  lengths=first.edge_lengths, n_nodes=first.n_nodes, n_edges=first.n_edges)
    return sg, array_from_parts(mesh, {p: sh.edge_id >= 0 for p, sh in mine.items()}, "edge_valid")
