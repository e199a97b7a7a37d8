"""``wordnet-lsa``: WordNet 3.0 (`load_wordnet`) with dense 128-dimensional gloss features.

Features: latent semantic analysis (Deerwester et al., "Indexing by Latent Semantic Analysis",
JASIS 1990) of the glosses: scikit-learn's ``TfidfVectorizer`` (`TFIDF` settings) then
``TruncatedSVD(n_components, algorithm="randomized", random_state=seed)``. This plays the part
that averaged word embeddings play in ogbn-arxiv (Hu et al., OGB, NeurIPS 2020): a dense,
low-dimensional text feature per node. Nodes, labels (45 lexicographer files), split and
(typed) edges are `load_wordnet`'s.
"""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np

from codesign.data import wordnet as wn
from codesign.data.derived import cached_arrays
from codesign.graph import Graph

NAME = "wordnet-lsa"
DEFAULT_COMPONENTS = 128
TFIDF = dict(lowercase=True, token_pattern=r"[a-z0-9]+", stop_words="english", min_df=2,
             sublinear_tf=True)
"""``TfidfVectorizer`` keyword arguments (the tokens are `wordnet.tokenize`'s pattern; English
stop words removed; tokens in fewer than 2 glosses dropped; ``1 + log(tf)``; L2-normalized rows)."""
SVD_ITER = 7  # randomized SVD power iterations (scikit-learn's default for n_components < 0.1 * F)


def lsa_features(glosses: list[str], n_components: int = DEFAULT_COMPONENTS, seed: int = 0) -> np.ndarray:
    """float32 [len(glosses), n_components]: TF-IDF (`TFIDF`) of ``glosses`` projected on its top
    ``n_components`` right singular vectors (``TruncatedSVD.fit_transform``; column k has
    variance decreasing in k). Deterministic for a fixed ``seed``, scikit-learn version and BLAS.

    Raises:
      ValueError: ``n_components`` not an int in [1, vocabulary size - 1]; ``seed`` not an int >= 0.
    """
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"lsa_features: seed must be an int >= 0, got {seed!r}")
    tfidf = TfidfVectorizer(**TFIDF, dtype=np.float32).fit_transform(glosses)
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) \
            or not 1 <= n_components < tfidf.shape[1]:
        raise ValueError(f"lsa_features: n_components must be an int in [1, {tfidf.shape[1] - 1}], "
                         f"got {n_components!r}")
    svd = TruncatedSVD(int(n_components), algorithm="randomized", n_iter=SVD_ITER, random_state=int(seed))
    return svd.fit_transform(tfidf).astype(np.float32)


def _glosses(d, data: dict) -> list[str]:
    """The glosses of the files' bytes ``data`` (read from folder ``d``), in node order."""
    return [g for f in wn.DATA_FILES for g in wn.parse_data_file(f, data[f], str(d / f)).gloss]


def load_wordnet_lsa(root: str | os.PathLike | None = None, *, n_components: int = DEFAULT_COMPONENTS,
                     seed: int = 0, split_seed: int = 0, symmetrize: bool = True,
                     cache: bool = True) -> Graph:
    """WordNet 3.0 as in `load_wordnet` (same files, nodes, ``y``, masks, edges and ``edge_type``
    for the same ``split_seed`` and ``symmetrize``), with ``x`` float32 [N, n_components] the
    `lsa_features` of the glosses (N = 117,659 in WordNet 3.0; 60 MB at 128 components).

    ``x`` is cached by `codesign.data.derived.cached_arrays` (slot ``wordnet-lsa``, with its
    SHA-256 and the parameters: the data files' SHA-256, ``n_components``, ``seed``, `TFIDF`,
    the scikit-learn version); any change rebuilds it.

    Raises:
      ValueError: bad ``n_components`` or ``seed`` (`lsa_features`); `load_wordnet`'s errors.
      FileNotFoundError: no WordNet files (`load_wordnet`).
    """
    import sklearn

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"load_wordnet_lsa: seed must be an int >= 0, got {seed!r}")
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) or n_components < 1:
        raise ValueError(f"load_wordnet_lsa: n_components must be a positive int, got {n_components!r}")
    # vocab_size=1: the bag of words is replaced, so build the smallest one
    graph = wn.load_wordnet(root, vocab_size=1, split_seed=split_seed, symmetrize=symmetrize, cache=cache)
    d = wn._locate(root)
    data, sha = wn._read_files(d, True)  # checked against WordNet 3.0's hashes, as load_wordnet does
    params = {"file_sha256": sha, "n_components": int(n_components), "seed": int(seed),
              "tfidf": {**TFIDF, "dtype": "float32"}, "svd": {"algorithm": "randomized", "n_iter": SVD_ITER},
              "sklearn": sklearn.__version__}
    x = cached_arrays(NAME, params, lambda: {"x": lsa_features(_glosses(d, data), int(n_components), int(seed))},
                      cache=cache)["x"]
    if x.shape != (graph.n_nodes, n_components):
        raise ValueError(f"load_wordnet_lsa: x has shape {x.shape}, expected {(graph.n_nodes, n_components)}")
    return graph.replace(x=jnp.asarray(x))
