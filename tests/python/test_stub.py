"""The type stub names exactly what the module exports: its classes, functions and their members."""

import ast
import pathlib

import pagedkv

STUB = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python" / "pagedkv.pyi"
TYPE_ALIASES = {"TokenIds", "HashLike", "PromptLike"}  # exist only in the stub


def defined_names(node):
    """The names a function definition or an assignment in the stub defines."""
    if isinstance(node, ast.FunctionDef):
        return {node.name}
    if isinstance(node, ast.AnnAssign):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets}
    return set()


def member_names(class_node):
    names = set().union(*(defined_names(node) for node in class_node.body))
    return {n for n in names if not n.startswith("_")}


def test_stub_matches_the_module():
    tree = ast.parse(STUB.read_text())
    top, classes = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            classes[node.name] = member_names(node)
        else:
            top |= defined_names(node)
    assert top - TYPE_ALIASES == {n for n in dir(pagedkv) if not n.startswith("_")} | {"__version__"}

    for name, stubbed in classes.items():
        cls = getattr(pagedkv, name)
        if issubclass(cls, BaseException):
            continue
        actual = {n for n in dir(cls) if not n.startswith("_")}
        if hasattr(cls, "__members__"):  # pybind11 enums also carry name and value
            actual -= {"name", "value"}
        assert stubbed == actual, (name, "stub only:", stubbed - actual, "module only:", actual - stubbed)
