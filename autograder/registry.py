"""The course's chapters and where each of their pieces lives. Chapter ids are stable names."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (id, title); ids are used for the book folder, the nbgrader assignment, the reference module and tests.
CHAPTERS = [
    ("01-rnn-limits", "Why not RNNs"),
    ("02-qkv-attention", "Q, K, V and scaled dot-product attention"),
    ("03-worked-examples", "Attention by hand"),
    ("04-multi-head", "Multi-head attention"),
    ("05-masks", "Masks"),
    ("06-positional-encoding", "Positional encoding"),
    ("07-ffn-layernorm", "FFN, residuals, LayerNorm"),
    ("08-encoder-decoder", "Encoder–decoder"),
    ("09-complexity-kv-cache", "Complexity and the KV cache"),
    ("10-capstone", "Capstone: a Transformer that learns"),
]
CHAPTER_IDS = [cid for cid, _ in CHAPTERS]
NOTEBOOK = "exercises"  # every chapter's exercise notebook is <chapter>/exercises.ipynb


def module_name(chapter_id: str) -> str:
    """'02-qkv-attention' -> 'ch02_qkv_attention' (solutions.<name>, autograder.checks.<name>)."""
    number, _, rest = chapter_id.partition("-")
    return f"ch{number}_{rest.replace('-', '_')}"


def instructor_source(chapter_id: str) -> Path:
    return ROOT / "autograder" / "source" / chapter_id / f"{NOTEBOOK}.md"


def student_notebook(chapter_id: str) -> Path:
    return ROOT / "chapters" / chapter_id / f"{NOTEBOOK}.ipynb"


def graded_chapters() -> list[str]:
    """Chapters that have exercises (an instructor source)."""
    return [cid for cid in CHAPTER_IDS if instructor_source(cid).exists()]


def answers(chapter_id: str):
    """The chapter's test data, autograder/source/<chapter>/answers.py (WRONG_ANSWERS, VALID_ANSWERS), loaded
    as a module (its folder's name is not a Python name). Tests, the demo and scripts read it; grading never does."""
    name = f"course_answers_{module_name(chapter_id)}"
    if name not in sys.modules:
        path = instructor_source(chapter_id).with_name("answers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]
