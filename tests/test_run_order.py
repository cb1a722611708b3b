"""The order of a submission's runs on the course grader (autograder/grading/run_order.py): every public run of its
problems before any hidden run, a public run after a hidden one refused, each problem's seconds its own, and the
problems' threads alive until the last is graded (a process started from a thread dies with it)."""

from __future__ import annotations

import threading
import time

import pytest

from autograder.grading.run_order import PublicAfterHidden, hidden_run, in_order, public_run

pytestmark = pytest.mark.slow


def test_every_public_run_of_the_problems_comes_before_any_hidden_run():
    said: list[str] = []

    def problem(name: str, runs: str):
        def grade():
            for kind in runs:
                if kind == "h":
                    hidden_run()
                else:
                    public_run(f"{name}'s public cases")
                said.append(f"{name}{kind}")
            return name

        return grade

    done = in_order([problem("a", "ph"), problem("b", "p"), problem("c", "phh"), problem("d", "h"), problem("e", "")])
    assert [value for value, _seconds in done] == ["a", "b", "c", "d", "e"]
    assert said == ["ap", "bp", "cp", "ah", "ch", "ch", "dh"]


def test_a_public_run_after_a_hidden_one_is_refused():
    def grade():
        hidden_run()
        public_run("the model on the public rows")

    with pytest.raises(PublicAfterHidden, match=r"public run \(the model on the public rows\) after a hidden run"):
        in_order([grade])


def test_outside_a_grading_neither_waits_nor_refuses():
    hidden_run()
    public_run("a public case set")


def test_a_problem_counts_the_seconds_it_ran_not_those_it_waited():
    def waits():
        hidden_run()  # until the other problem's public run is done

    def runs():
        time.sleep(2.0)  # a public run

    (_, waited), (_, ran) = in_order([waits, runs])
    assert ran >= 2.0 and waited < 1.0, (waited, ran)


def test_the_threads_live_until_every_problem_is_graded():
    threads: list[threading.Thread] = []

    def first():
        threads.append(threading.current_thread())

    def second():
        hidden_run()
        return threads[0].is_alive()  # the first problem ended long ago; its thread (and what it started) lives

    assert [value for value, _ in in_order([first, second])] == [None, True]
