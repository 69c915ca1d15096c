"""An unknown task name answers with the closest registered ones (domain/suggest.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate import UnknownTask
from tidegate.domain.suggest import MOST, closest, unknown_task

WORDS = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)


def test_the_bare_function_name_finds_its_module_qualified_name():
    error = unknown_task("add", ["tasks.add", "tasks.multiply", "billing.invoice"], "sqlite:///x.db")
    assert isinstance(error, UnknownTask)
    assert str(error) == "unknown task 'add'; did you mean 'tasks.add'?"


def test_a_typo_finds_the_name_and_several_close_names_are_all_offered_best_first():
    assert closest("tasks.ad", ["tasks.add", "other.thing"]) == ["tasks.add"]
    assert closest("add", ["a.add", "b.add", "a.adds", "z.unrelated"]) == ["a.add", "b.add", "a.adds"]
    assert str(unknown_task("add", ["b.add", "a.add"], "db")) == "unknown task 'add'; did you mean 'a.add' or 'b.add'?"


def test_with_nothing_close_the_answer_says_how_a_task_gets_registered():
    message = str(unknown_task("add", ["billing.invoice"], "sqlite:///x.db"))
    assert message.startswith("unknown task 'add': no app has registered it in sqlite:///x.db")
    assert "start a worker" in message
    assert "did you mean" not in str(unknown_task("add", [], "db"))


@given(name=WORDS, modules=st.lists(WORDS, min_size=1, max_size=4), others=st.lists(WORDS, max_size=6))
def test_a_name_registered_under_any_module_is_always_offered(name, modules, others):
    known = [f"{module}.{name}" for module in modules] + others
    found = closest(name, known)
    assert set(found) <= set(known)
    assert len(found) <= MOST
    assert any(candidate.rsplit(".", 1)[-1] == name for candidate in found)
