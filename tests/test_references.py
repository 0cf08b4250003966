"""What the tree's prose cites exists: every ``*.md`` file a document, comment or docstring names, every section
it cites as ``file.md, "Section"``, and no document names a path of one machine (``/work/...``, ``/home/...``).

The scanner is checked first on a small tree with each fault planted, so that these tests can fail.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: what is scanned: the documents at the top, and every directory of the tree a reader goes through
TOP_FILES = ("README.md", "CONTRIBUTING.md", "pyproject.toml", "setup.py")
DIRECTORIES = ("docs", "examples", "tests", "autodist", "scripts", "benchmarks", "resource_specs", "proto", ".ci")
SUFFIXES = (".md", ".py", ".sh", ".sbatch", ".yml", ".yaml", ".toml", ".proto")
SKIP = ("__pycache__", "results")
_FILE = re.compile(r"(?<![\w/.~-])((?:[\w-]+/)*[\w-]+\.md)\b")
_SECTION = re.compile(r"(?<![\w/.~-])((?:[\w-]+/)*[\w-]+\.md)\)?,\s+\"([^\"]+)\"")
_MACHINE_PATH = re.compile(r"(?<![\w.<~-])/(?:work|home|root|Users)/[\w./-]+")


def scanned_files(root):
    """Every file of ``root`` the references are read from (relative paths, sorted; this one's planted faults
    aside)."""
    found = [name for name in TOP_FILES if os.path.isfile(os.path.join(root, name))]
    for directory in DIRECTORIES:
        for path, dirs, files in os.walk(os.path.join(root, directory)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP and not d.endswith(".egg-info"))
            found += [os.path.relpath(os.path.join(path, f), root) for f in files
                      if f.endswith(SUFFIXES) and "_pb2" not in f]
    return sorted(f for f in found if os.path.join(root, f) != os.path.abspath(__file__))


def _resolve(root, citing, name):
    """The cited file: relative to the tree's root, to the citing file's directory, or in docs/; None if none."""
    for base in (root, os.path.join(root, os.path.dirname(citing)), os.path.join(root, "docs")):
        if os.path.isfile(os.path.join(base, name)):
            return os.path.join(base, name)
    return None


def _headings(path):
    with open(path, encoding="utf-8") as f:
        return [line.lstrip("#").strip().casefold() for line in f if line.startswith("#")]


def broken_references(root):
    """``"file:line: what"`` for every cited file or section that does not exist."""
    broken = []
    for citing in scanned_files(root):
        with open(os.path.join(root, citing), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for match in _FILE.finditer(text):
            if _resolve(root, citing, match.group(1)) is None:
                broken.append("{}:{}: {} does not exist".format(citing, text.count("\n", 0, match.start()) + 1,
                                                                match.group(1)))
        for match in _SECTION.finditer(text):
            target = _resolve(root, citing, match.group(1))
            section = match.group(2).casefold()
            if target is not None and not any(h.startswith(section) for h in _headings(target)):
                broken.append("{}:{}: {} has no section {!r}".format(
                    citing, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2)))
    return broken


def machine_paths(root):
    """``"file:line: path"`` for every absolute path of one machine in a document (``*.md``)."""
    found = []
    for citing in scanned_files(root):
        if citing.endswith(".md"):
            with open(os.path.join(root, citing), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    found += ["{}:{}: {}".format(citing, number, m.group(0)) for m in _MACHINE_PATH.finditer(line)]
    return found


def test_the_scanner_finds_missing_files_sections_and_machine_paths(tmp_path):
    files = {
        "README.md": "# Top\nSee docs/guide.md and [the guide](docs/guide.md), and DESIGN.md.\n",
        "docs/guide.md": "# Guide\n## Slurm tasks\nSee [kube](kube.md) and other.md; run /work/main/x.py, "
                         "not `<checkout>/x`.\n",
        "docs/kube.md": "# Kubernetes\n",
        "examples/job.sbatch": '# (docs/kube.md, "Slurm") and (docs/guide.md, "Slurm tasks")\n',
        "tests/test_x.py": '"""As docs/guide.md, "Nowhere" says."""\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    root = str(tmp_path)
    assert broken_references(root) == [
        "README.md:2: DESIGN.md does not exist", "docs/guide.md:3: other.md does not exist",
        "examples/job.sbatch:1: docs/kube.md has no section 'Slurm'",
        "tests/test_x.py:1: docs/guide.md has no section 'Nowhere'"]
    assert machine_paths(root) == ["docs/guide.md:3: /work/main/x.py"]


def test_every_cited_file_and_section_exists():
    assert broken_references(ROOT) == []


def test_no_document_names_a_path_of_one_machine():
    assert machine_paths(ROOT) == []
