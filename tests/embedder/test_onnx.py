"""Short passes through ONNX Runtime: the real MiniLM exported once into a real cache folder,
checked against torch, and never trusted when its file or its vectors are wrong."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import LocalEmbedder, make_embedder
from memory_mcp.embedder.model import (
    ONE_THREAD_TEXTS,
    SentenceTransformerModel,
    encode,
    encode_mixed,
    load_model,
    resolve_model_path,
)
from memory_mcp.embedder.onnx_model import (
    FILES,
    MAX_PARITY_DIFFERENCE,
    MIN_QUERY_COSINE,
    ONNX_FILE,
    QUERY_FILE,
    model_checksum,
    onnx_folder,
    prepare_encoders,
)
from memory_mcp.embedder.static_cache import MANIFEST, cached_folder_is_valid
from tests.embedder.support import SENTENCES

SETTLE_S = 300  # an export on two busy cores: seconds; the bound only stops a hung test


def _load(roots: list[Path], **options: object) -> SentenceTransformerModel:
    """The packaged MiniLM with its short passes' runtime settled."""
    loaded = load_model(None, "cpu", onnx_roots=roots, **options)  # type: ignore[arg-type]
    assert isinstance(loaded, SentenceTransformerModel)
    assert loaded.short_runtime_settled.wait(SETTLE_S)
    return loaded


def _checksum() -> str:
    return model_checksum(resolve_model_path(None))


def _folder(root: Path) -> Path:
    return onnx_folder(root, _checksum())


@pytest.fixture(scope="module")
def onnx_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_model(onnx_root: Path) -> SentenceTransformerModel:
    return _load([onnx_root])


def test_short_passes_run_on_onnx_with_torchs_vectors(onnx_model, model) -> None:
    assert onnx_model.short_runtime == "onnxruntime" and model.short_runtime == "torch"
    for texts in (
        [SENTENCES[0]],
        SENTENCES[:5],
        ["short", "a much longer question about the deploy pipeline's runners"],
    ):
        through_onnx, through_torch = encode(onnx_model, texts, "query"), encode(model, texts, "query")
        assert through_onnx.dtype == np.float32 and through_onnx.shape == through_torch.shape
        assert float(np.abs(through_onnx - through_torch).max()) <= MAX_PARITY_DIFFERENCE
        np.testing.assert_allclose(np.linalg.norm(through_onnx, axis=1), 1.0, atol=1e-6)
    # A batch longer than the short passes' runs on torch in both: the very same vectors.
    long = [f"{SENTENCES[n % len(SENTENCES)]} ({n})" for n in range(ONE_THREAD_TEXTS + 1)]
    assert np.array_equal(encode(onnx_model, long), encode(model, long))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1))


def test_questions_take_the_int8_copy_and_stored_vectors_stay_exact(onnx_root: Path, model) -> None:
    int8 = _load([onnx_root], int8_queries=True)
    assert int8.short_runtime == "onnxruntime" and int8.queries_differ and not model.queries_differ
    texts = [SENTENCES[0], "which runners does the deploy pipeline use?", "Where did Caroline move from?"]
    questions = np.concatenate([encode(int8, [text], "query") for text in texts])
    exact = encode(model, texts, "query")
    # Near torch's vectors, and not torch's: the int8 copy answered.
    assert float(_cosines(questions, exact).min()) >= MIN_QUERY_COSINE
    assert float(np.abs(questions - exact).max()) > MAX_PARITY_DIFFERENCE
    np.testing.assert_allclose(np.linalg.norm(questions, axis=1), 1.0, atol=1e-5)
    # What is stored is exact, alone or beside questions in one batch of the batcher.
    passages = encode(int8, texts, "passage")
    assert float(np.abs(passages - exact).max()) <= MAX_PARITY_DIFFERENCE
    mixed = encode_mixed(int8, [texts[0], texts[0]], ["passage", "query"])
    assert float(np.abs(mixed[0] - exact[0]).max()) <= MAX_PARITY_DIFFERENCE
    assert np.array_equal(mixed[1], questions[0])
    # A long batch of questions runs on torch: exact.
    long = [f"{SENTENCES[n % len(SENTENCES)]} ({n})" for n in range(ONE_THREAD_TEXTS + 1)]
    assert np.array_equal(encode(int8, long, "query"), encode(model, long, "query"))


def test_an_int8_copy_that_strays_from_torch_is_not_used(
    onnx_model, model, onnx_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def reference(texts: list[str]) -> np.ndarray:
        return encode(model, texts, "passage")

    assert isinstance(model, SentenceTransformerModel)
    source = resolve_model_path(None)
    checked = prepare_encoders(model.model, source, [onnx_root], reference, int8_queries=True)
    assert checked.queries is not None
    with caplog.at_level(logging.WARNING, logger="memory_mcp.embedder.onnx_model"):
        strict = prepare_encoders(
            model.model, source, [onnx_root], reference, int8_queries=True, min_query_cosine=0.99999
        )
    assert strict.queries is None and strict.exact is not None
    assert any(
        "int8 copy is not usable" in r.message and "(under 0.99999)" in r.message for r in caplog.records
    )
    # Asked for none, none is opened.
    assert prepare_encoders(model.model, source, [onnx_root], reference, int8_queries=False).queries is None


def test_the_file_is_made_once_and_a_second_load_reuses_it(onnx_model, onnx_root: Path) -> None:
    folder = _folder(onnx_root)
    assert cached_folder_is_valid(folder, _checksum(), FILES)
    before = {name: (folder / name).stat() for name in (*FILES, MANIFEST)}
    again = _load([onnx_root])
    assert again.short_runtime == "onnxruntime"
    after = {name: (folder / name).stat() for name in (*FILES, MANIFEST)}
    assert {n: (s.st_ino, s.st_mtime_ns) for n, s in before.items()} == {
        n: (s.st_ino, s.st_mtime_ns) for n, s in after.items()
    }
    assert [p.name for p in onnx_root.iterdir() if p.name.startswith(".onnx-staging-")] == []


def test_a_truncated_file_is_made_again_and_encoding_goes_on(
    onnx_model, model, onnx_root: Path, tmp_path: Path
) -> None:
    folder = _folder(tmp_path)
    shutil.copytree(_folder(onnx_root), folder)
    whole = (folder / ONNX_FILE).stat().st_size
    with (folder / ONNX_FILE).open("r+b") as file:
        file.truncate(whole // 2)
    assert not cached_folder_is_valid(folder, _checksum(), FILES)

    remade = _load([tmp_path])
    assert remade.short_runtime == "onnxruntime"
    assert (folder / ONNX_FILE).stat().st_size == whole
    assert cached_folder_is_valid(folder, _checksum(), FILES)
    texts = SENTENCES[:3]
    assert float(np.abs(encode(remade, texts) - encode(model, texts)).max()) <= MAX_PARITY_DIFFERENCE


def test_a_file_whose_vectors_differ_from_torchs_is_not_used(
    onnx_model, model, onnx_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import onnx
    from onnx import numpy_helper

    # A file that matches its manifest but not the model: the word embeddings scaled by 1 %.
    folder = _folder(tmp_path)
    shutil.copytree(_folder(onnx_root), folder)
    graph = onnx.load(str(folder / ONNX_FILE))
    table = next(t for t in graph.graph.initializer if "word_embeddings" in t.name)
    table.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(table) * 1.01, table.name))
    onnx.save(graph, str(folder / ONNX_FILE))
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][ONNX_FILE] = hashlib.sha256((folder / ONNX_FILE).read_bytes()).hexdigest()
    (folder / MANIFEST).write_text(json.dumps(manifest))

    with caplog.at_level(logging.WARNING, logger="memory_mcp.embedder.model"):
        kept = _load([tmp_path])
    assert kept.short_runtime == "torch"
    assert any("stay on torch" in r.message and "differ from torch's" in r.message for r in caplog.records)
    texts = SENTENCES[:3]
    assert np.array_equal(encode(kept, texts), encode(model, texts))


def test_bf16_keeps_its_short_passes_on_torch_and_exports_nothing(tmp_path: Path) -> None:
    loaded = _load([tmp_path], precision="bf16")
    assert loaded.precision.mode == "bf16" and loaded.short_runtime == "torch"
    assert not _folder(tmp_path).exists()
    assert encode(loaded, [SENTENCES[0]]).shape == (1, loaded.dim)


async def test_the_in_process_embedder_keeps_the_file_beside_the_static_table(tmp_path: Path) -> None:
    settings = Settings(
        embedder="local",
        embedding_precision="fp32",
        cache_dir=tmp_path / "cache",
        static_embedding_dir=tmp_path / "static",
    )
    command = await make_embedder(settings)  # a command embeds in bulk and exits: no export
    try:
        assert isinstance(command, LocalEmbedder) and command.model.short_runtime_settled.is_set()
        assert command.model.short_runtime == "torch"
    finally:
        await command.aclose()
    assert not _folder(tmp_path / "static").exists() and not _folder(tmp_path / "cache").exists()
    embedder = await make_embedder(settings, short_passes_on_onnx=True)  # a server
    try:
        assert isinstance(embedder, LocalEmbedder) and isinstance(embedder.model, SentenceTransformerModel)
        assert await asyncio.to_thread(embedder.model.short_runtime_settled.wait, SETTLE_S)
        assert embedder.model.short_runtime == "onnxruntime"
        assert embedder.model.queries_differ  # a server's questions take the int8 copy by default
        assert (_folder(tmp_path / "static") / ONNX_FILE).is_file()
        assert (_folder(tmp_path / "static") / QUERY_FILE).is_file()
        assert not _folder(tmp_path / "cache").exists()
        question = "which runners does the deploy pipeline use?"
        assert len(await embedder.embed_query(question)) == embedder.dim
    finally:
        await embedder.aclose()


def test_a_process_that_exits_while_exporting_leaves_nothing_half_written(tmp_path: Path) -> None:
    """The export runs in a child process that the parent stops on its way out: the process exits
    cleanly (a thread inside torch's tracer at exit aborted it), the child removes its staging
    folder, and no ONNX folder appears."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from memory_mcp.embedder.model import load_model\n"
        "root = Path(sys.argv[1])\n"
        "model = load_model(None, 'cpu', onnx_roots=[root])\n"
        "deadline = time.monotonic() + 120\n"
        "while not list(root.glob('.onnx-staging-*')) and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print('exporting' if list(root.glob('.onnx-staging-*')) else 'not exporting', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip() == "exporting"
    assert [p.name for p in tmp_path.iterdir()] == [".onnx-export.lock"]


def test_onnx_runtime_sends_no_telemetry_and_writes_no_device_id(tmp_path: Path) -> None:
    """ONNX Runtime (1.29 and later) uploads usage events and keeps a device id under the home
    folder unless told not to; any process that loads the product's code tells it not to."""
    home = tmp_path / "home"
    home.mkdir()
    script = (
        "import os, sys\n"
        "import memory_mcp.core\n"
        "import onnx, onnxruntime\n"
        "from onnx import TensorProto, helper\n"
        "x = helper.make_tensor_value_info('x', TensorProto.FLOAT, [1])\n"
        "y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [1])\n"
        "graph = helper.make_graph([helper.make_node('Identity', ['x'], ['y'])], 'g', [x], [y])\n"
        "model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])\n"
        "model.ir_version = 8\n"
        "onnxruntime.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])\n"
        "print(os.environ.get('ORT_DISABLE_TELEMETRY'))\n"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ORT_") and k != "CI"} | {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "1"
    assert "telemetry" not in done.stderr
    assert [p for p in home.rglob("*") if p.is_file()] == []
