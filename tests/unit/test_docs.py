"""Every Python example of the README and the docs is marked as what it is
(a test, a module, a script, or a fragment saying why it is not run), and
every runnable one compiles; tests/world/test_docs.py runs them."""

from __future__ import annotations

import re

import doc_examples


def test_every_python_example_is_marked_and_every_runnable_one_compiles():
    found, problems = doc_examples.files()
    assert not problems, "\n".join(problems)
    assert any(kind == "test" for kind, _ in found.values())
    for name, (_, code) in found.items():
        compile(code, name, "exec")


def test_an_unmarked_block_a_fragment_without_a_reason_and_a_shared_name_are_refused(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "<!-- test: test_a.py -->\n```python\ndef test_a(): pass\n```\n\n"
        "```python\nx = 1\n```\n\n"
        "<!-- fragment: -->\n```python\ny = 2\n```\n\n"
        "<!-- script: Bad-Name.py -->\n```python\nz = 3\n```\n")
    (tmp_path / "CONTRIBUTING.md").write_text("")
    (tmp_path / "docs" / "guide.md").write_text(
        "<!-- test: test_a.py -->\n```python\ndef test_b(): pass\n```\n\n"
        "<!-- module: test_b.py -->\n```python\nfoo = 1\n```\n"
        "<!-- test: b.py -->\n```python\nbar = 1\n```\n")
    monkeypatch.setattr(doc_examples, "ROOT", tmp_path)
    found, problems = doc_examples.files()
    assert problems == [
        "README.md:6: a python block without a marker before it "
        "(<!-- test|module|script: NAME.py --> or <!-- fragment: REASON -->)",
        "README.md:11: a fragment must say why it is not run",
        "README.md:16: 'Bad-Name.py' is not a file name like name.py",
        "docs/guide.md:11: a test file's name starts with test_, not 'b.py'",
        "docs/guide.md:2: test_a.py is also a file of README.md; name it differently",
    ]
    assert found == {"test_a.py": ("test", "def test_a(): pass\n"), "test_b.py": ("module", "foo = 1\n")}


def test_blocks_of_one_file_are_joined_in_order(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "CONTRIBUTING.md").write_text("")
    (tmp_path / "README.md").write_text(
        "<!-- test: test_a.py -->\n```python\ndef f(): return 1\n```\n\ntext\n\n"
        "<!-- test: test_a.py -->\n\n```python\ndef test_f(): assert f() == 1\n```\n")
    monkeypatch.setattr(doc_examples, "ROOT", tmp_path)
    assert doc_examples.files() == ({"test_a.py": ("test", "def f(): return 1\n\n\ndef test_f(): assert f() == 1\n")},
                                    [])


def test_the_layout_names_every_module_of_the_library():
    """docs/layout.md is the map a contributor reads first: a module it
    leaves out is one nobody finds (eight were missing once, issue 38)."""
    root = doc_examples.ROOT
    layout = (root / "docs" / "layout.md").read_text()
    package = root / "rpc_harness"
    names = [path.name for path in package.glob("*.py") if path.name not in ("__init__.py", "__main__.py")]
    names += [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()]
    missing = sorted(name for name in names if not re.search(rf"(?<![\w/.]){re.escape(name)}(?![\w.])", layout))
    assert not missing, f"docs/layout.md does not name {', '.join(missing)}"
