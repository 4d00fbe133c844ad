"""Trajectory-guided synthesis, the pure half: rollouts folded from events, where failed
rollouts leave the reference, the sub-goals chosen, clusters, conjunctive composition, and
the decomposer's and composer's strict parsers (hand-made trajectories, no desktop)."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from producers.verigen.agents import ParseError, parse_composition, parse_subtask
from producers.verigen.augment import (
    AugmentSettings,
    Plan,
    plan_compose,
    plan_decompose,
    plan_requests,
    solved_by_app,
)
from producers.verigen.candidate import Candidate
from producers.verigen.compose import (
    CompositionError,
    cluster,
    compose_candidate,
    compose_conflicts,
    compose_groups,
    conjoin_evaluators,
    inline_uploads,
)
from producers.verigen.deviation import (
    actions_match,
    deviation_point,
    find_deviation,
    fold_rollouts,
    subgoal_ends,
)
from runtime.envs.tasks.evaluate import combine
from runtime.envs.tasks.model import Task
from tests.producers.verigen.scenarios import note_candidate, terminal_solution
from topics.events import Reward, RolloutStep, TrajectoryComplete

OPEN = {"action": "key", "text": "ctrl+alt+t"}
WAIT = {"action": "wait", "duration": 2.0}
REFERENCE = [
    OPEN, WAIT,
    {"action": "type", "text": "mkdir -p ~/proj\n"},
    {"action": "type", "text": "cd ~/proj\n"},
    {"action": "type", "text": "mkdir src tests docs\n"},
    {"action": "type", "text": "echo '# Proj' > README.md\n"},
]  # fmt: skip


def _events(task_id: str, trajectory: str, actions: list[Any], score: float, *,
            errors: dict[int, str] | None = None, status: str = "done",
            ts: int = 1) -> list[Any]:  # fmt: skip
    """A rollout as the log holds it: steps, the end of the episode, a reward."""
    steps = [
        RolloutStep(
            trajectory_id=trajectory,
            step=i,
            task_id=task_id,
            action=a,
            action_error=(errors or {}).get(i),
        )  # fmt: skip
        for i, a in enumerate(actions)
    ]
    end = TrajectoryComplete(trajectory_id=trajectory, status=status, num_steps=len(actions),
                             task_id=task_id)  # fmt: skip
    reward = Reward(trajectory_id=trajectory, task_id=task_id, group_id="g", group_size=4,
                    score=score, ts_ms=ts)  # fmt: skip
    return [*steps, end, reward]


def _fold(*rollouts: list[Any]) -> dict:
    events = [e for r in rollouts for e in r]
    return fold_rollouts(
        [e for e in events if isinstance(e, RolloutStep)],
        [e for e in events if isinstance(e, TrajectoryComplete)],
        [e for e in events if isinstance(e, Reward)],
    )


def test_actions_match_by_what_they_do() -> None:
    assert actions_match(OPEN, {"action": "key", "text": "alt+ctrl+t"})
    assert not actions_match(OPEN, {"action": "key", "text": "ctrl+t"})
    assert actions_match(
        {"action": "type", "text": "ls  -l\r\n"}, {"action": "type", "text": "ls -l\n"}
    )
    assert not actions_match({"action": "type", "text": "ls\n"}, {"action": "type", "text": "ls"})
    click = {"action": "left_click", "coordinate": [500, 500]}
    assert actions_match(click, {"action": "left_click", "coordinate": [520, 510]})
    assert not actions_match(click, {"action": "left_click", "coordinate": [540, 500]})
    assert not actions_match(click, {"action": "double_click", "coordinate": [500, 500]})
    assert not actions_match(click, {**click, "text": "ctrl"})  # a ctrl+click is another click
    scroll = {"action": "scroll", "coordinate": [10, 10], "scroll_direction": "down"}
    assert not actions_match(scroll, {**scroll, "scroll_direction": "up"})


def test_the_deviation_is_the_first_reference_action_a_failed_rollout_misses() -> None:
    wrong = {"action": "type", "text": "mkdir src test docs\n"}
    outcomes = _fold(
        # reproduces 0..2 (waits, a refused click and an unparsed turn change nothing), then errs
        _events(
            "scaffold",
            "t/0",
            [
                OPEN,
                WAIT,
                {"action": "left_click", "coordinate": [1, 1]},
                None,
                *REFERENCE[2:4],
                wrong,
            ],
            0.0,
            errors={2: "refused"},
        ),  # fmt: skip
        _events("scaffold", "t/1", [OPEN, *REFERENCE[2:4], wrong, {"action": "done"}], 0.0),
        _events("scaffold", "t/2", [{"action": "type", "text": "ls\n"}], 0.0),  # errs at once
        _events("scaffold", "t/3", REFERENCE, 1.0),
    )
    outcome = outcomes["scaffold"]
    assert outcome.pass_rate == 0.25 and len(outcome.failed) == 3
    point = deviation_point(outcome, REFERENCE)
    assert point is not None and point.reference_source == "solution"
    assert len(point.reference) == 5  # the wait is no action on the desktop
    assert [d.index for d in point.deviations] == [3, 3, 0]
    assert point.index == 3  # the most common point
    first = point.deviations[0]
    assert (first.step, first.expected, first.observed) == (6, REFERENCE[4], wrong)
    record = point.to_dict()
    assert record["observed"] == [{"action": wrong, "rollouts": 2}]
    assert record["histogram"] == {0: 1, 3: 2} and record["expected"] == REFERENCE[4]
    # without a solution, the shortest successful rollout is the reference
    assert deviation_point(outcome, None).reference_source == "rollout:t/3"


def test_a_rollout_that_stops_early_or_does_everything_deviates_past_what_it_did() -> None:
    outcomes = _fold(_events("t", "a", [OPEN], 0.0), _events("t", "b", REFERENCE, 0.0))
    short, full = (find_deviation(r, REFERENCE[:1] + REFERENCE[2:]) for r in outcomes["t"].rollouts)
    assert (short.index, short.step, short.observed) == (1, None, None)
    assert (full.index, full.expected) == (5, None)


def test_rollouts_without_a_score_all_steps_or_a_working_desktop_are_left_out() -> None:
    unscored = _events("t", "u", [OPEN], 0.0)
    unscored[-1] = Reward(trajectory_id="u", task_id="t", group_id="g", group_size=1, score=0.0,
                          scored=False)  # fmt: skip
    partial = _events("t", "p", [OPEN, WAIT], 0.0)[1:]  # step 0 is missing from the log
    broken = _events("t", "e", [OPEN], 0.0, status="error")
    rejudged = _events("t", "r", [OPEN], 0.0) + [
        Reward(trajectory_id="r", task_id="t", group_id="g", group_size=1, score=1.0, ts_ms=9)
    ]
    outcome = _fold(unscored, partial, broken, rejudged)["t"]
    assert [r.trajectory_id for r in outcome.rollouts] == ["p", "r"]
    assert outcome.rollouts[0].turns is None  # counted for the pass rate, not for deviations
    assert outcome.rollouts[1].succeeded  # the latest reward counts


def test_sub_goals_start_at_the_deviation_and_stay_intermediate() -> None:
    assert subgoal_ends(5, 3, 2) == [3, 2]
    assert subgoal_ends(5, 1, 2) == [1, 2]
    assert subgoal_ends(5, 5, 3) == [3, 2, 1]  # all reproduced: the last intermediate states
    assert subgoal_ends(5, 0, 9) == [0, 1, 2, 3]
    assert subgoal_ends(1, 0, 2) == []  # one action: no intermediate state


def _parent(name: str, text: str, **more: Any) -> dict[str, Any]:
    task = note_candidate(name, text)
    task.update({"id": f"task-{name}", **more})
    return task


def test_composition_runs_every_setup_and_passes_only_when_every_verifier_passes() -> None:
    setup = {"type": "execute", "parameters": {"command": "mkdir -p /home/user/a", "shell": True}}
    a = _parent("a.txt", "one", config=[setup])
    b = _parent("b.txt", "two", config=[setup, {"type": "sleep", "parameters": {"seconds": 1}}])
    b["solution"] = [*b["solution"], {"action": "done"}]
    raw = compose_candidate([a, b], instruction="Write one to a.txt and two to b.txt.",
                            explanation="both files are judged", difficulty="medium",
                            estimated_steps=8)  # fmt: skip
    candidate = Candidate.from_dict(raw)  # a well-formed candidate for the loop
    assert candidate.app == "terminal" and raw["config"] == [setup, b["config"][1]]
    ev = raw["evaluator"]
    assert ev["func"] == ["sandboxed_judge", "sandboxed_judge"] and ev["conj"] == "and"
    assert [r["dest"] for r in ev["result"]] == ["p0-a.txt", "p1-b.txt"]  # no clash locally
    assert [o["source"] for o in ev["options"]] == [a["evaluator"]["options"]["source"]] * 2
    assert raw["solution"] == terminal_solution("a.txt", "one") + terminal_solution("b.txt", "two")
    evaluator = Task.from_dict(raw).evaluator
    assert evaluator.conj == "and" and len(evaluator.funcs) == 2
    assert combine([1.0, 0.0], evaluator.conj) == 0.0 and combine([1.0, 1.0], "and") == 1.0


def test_conjoining_keeps_each_parents_funcs_and_refuses_what_it_cannot_keep() -> None:
    multi = {"func": ["file_exists", "exact_match"], "conj": "and",
             "result": [{"type": "vm_file", "path": "/home/user/x", "dest": "x"},
                        {"type": "vm_command_line", "command": "cat /home/user/x"}],
             "expected": [None, {"type": "rule", "rules": {"expected": "x"}}],
             "postconfig": [{"type": "sleep", "parameters": {"seconds": 1}}]}  # fmt: skip
    single = {"func": "file_exists", "result": {"type": "vm_file", "path": "/home/user/y"}}
    out = conjoin_evaluators([multi, single])
    assert out["func"] == ["file_exists", "exact_match", "file_exists"]
    assert out["expected"] == [None, multi["expected"][1], None]
    assert out["postconfig"] == multi["postconfig"]
    with pytest.raises(CompositionError, match="or"):
        conjoin_evaluators([{**multi, "conj": "or"}, single])
    with pytest.raises(CompositionError, match="infeasible"):
        conjoin_evaluators([{"func": "infeasible"}, single])


def test_tasks_that_would_clash_are_not_composed() -> None:
    a = _parent("a.txt", "one")
    assert compose_conflicts([a, _parent("b.txt", "two")]) == []
    assert (
        "both judged on /home/user/a.txt"
        in compose_conflicts([a, _parent("a.txt", "x", id="b")])[0]
    )
    no_solution = _parent("c.txt", "three")
    del no_solution["solution"]
    assert "no solution" in compose_conflicts([a, no_solution])[0]
    folder = _parent("d.txt", "four", config=[{"type": "upload_file", "parameters": {
        "files": [{"local_path": "files/d.txt", "path": "/home/user/d.txt"}]}}])  # fmt: skip
    assert "outside the desktop" in compose_conflicts([folder])[0]
    writer = _parent("e.txt", "five", app="writer")
    assert "different" in compose_conflicts([a, writer])[0]
    answering = _parent("f.txt", "six", solution=[{"action": "answer", "text": "6"}])
    assert "answers" in compose_conflicts([answering])[0]
    with pytest.raises(CompositionError):
        compose_candidate([a, _parent("a.txt", "x", id="b")], instruction="x", explanation="x",
                          difficulty="hard", estimated_steps=5)  # fmt: skip


def test_uploaded_files_become_setup_commands_writing_their_bytes() -> None:
    config = [
        {"type": "upload_file", "parameters": {"files": [
            {"local_path": "files/a.bin", "path": "/home/user/docs/a.bin"}]}},
        {"type": "upload_file", "parameters": {"files": [
            {"local_path": "files/missing", "path": "/home/user/m"}]}},
        {"type": "open", "parameters": {"path": "/home/user/docs/a.bin"}},
    ]  # fmt: skip
    data = bytes(range(256))
    out = inline_uploads(config, {"files/a.bin": data})
    assert out[1:] == config[1:]  # a file not given stays an upload
    command = out[0]["parameters"]["command"]
    assert out[0]["type"] == "execute" and command[:2] == ["python3", "-c"]
    assert base64.b64encode(data).decode() in command[2] and "/home/user/docs/a.bin" in command[2]


def test_clusters_join_similar_tasks_and_groups_pair_the_closest_compatible_ones() -> None:
    vectors = np.array([[1, 0, 0], [0.95, 0.3, 0], [0.9, 0.1, 0.4], [0, 1, 0], [0, 0.1, 1]])
    similarity = vectors @ vectors.T / np.outer(*[np.linalg.norm(vectors, axis=1)] * 2)
    assert cluster(similarity, 0.8) == [[0, 1, 2], [3], [4]]
    assert cluster(similarity, 0.999) == [[0], [1], [2], [3], [4]]
    assert cluster(similarity, -1.0) == [[0, 1, 2, 3, 4]]
    assert compose_groups(similarity, [[0, 1, 2]], 2, lambda g: True) == [[0, 1]]
    assert compose_groups(similarity, [[0, 1, 2]], 2, lambda g: g != [0, 1]) == [[0, 2]]
    assert compose_groups(similarity, [[0, 1, 2]], 3, lambda g: True) == [[0, 1, 2]]


def test_the_plan_decomposes_failed_train_tasks_and_composes_solved_ones() -> None:
    failing = _parent("scaffold.txt", "x", solution=REFERENCE)
    solved = [_parent(f"s{i}.txt", f"v{i}") for i in range(3)]
    tasks = {t["id"]: t for t in [failing, *solved]}
    wrong = [OPEN, {"action": "type", "text": "mkdir proj\n"}]
    rollouts = [_events(failing["id"], f"f/{i}", wrong, 0.0) for i in range(3)]
    for t in solved:
        rollouts += [_events(t["id"], f"{t['id']}/{i}", t["solution"], 1.0) for i in range(2)]
    rollouts.append(_events("not-on-topic", "x/0", wrong, 0.0))
    rollouts.append(_events("not-on-topic", "x/1", wrong, 0.0))
    outcomes = _fold(*rollouts)
    settings = AugmentSettings(subtasks=2)
    plan = Plan()
    plan_decompose(outcomes, tasks, settings, plan)
    assert plan.failed_tasks == 1 and len(plan.decompose) == 2
    seed = plan.decompose[0]
    assert seed["parents"] == [failing["id"]] and seed["deviation"]["index"] == 1
    assert [s["subgoal"]["through"] for s in plan.decompose] == [1, 2]
    solved_ids = solved_by_app(outcomes, tasks, settings, plan)
    assert solved_ids == {"terminal": [t["id"] for t in solved]}
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    plan_compose("terminal", solved_ids["terminal"], vectors, tasks, settings, plan)
    assert [s["parents"] for s in plan.compose] == [[solved[0]["id"], solved[1]["id"]]]
    assert plan.clusters == {"terminal": [[solved[0]["id"], solved[1]["id"]]]}
    requests = plan_requests(plan, "run1", max_rounds=1)
    assert [(r.request_id, r.mode, r.app) for r in requests] == [
        ("run1/decompose-0", "decompose", "terminal"),
        ("run1/decompose-1", "decompose", "terminal"),
        ("run1/compose-0", "compose", "terminal"),
    ]
    assert requests[0].max_rounds == 1
    json.dumps([r.seed for r in requests])  # seeds travel as JSON


def test_the_decomposer_and_composer_replies_are_held_to_their_schema() -> None:
    task = note_candidate("sub.txt", "half")
    sub = parse_subtask(json.dumps({"subgoal": "the folder exists", "task": task}), "terminal", 6)
    assert sub.subgoal == "the folder exists" and sub.candidate.task.instruction
    for bad, why in [
        ({"task": task}, "nothing else"),
        ({"subgoal": "", "task": task}, "subgoal"),
        ({"subgoal": "x", "task": {**task, "estimated_steps": 9}}, "easier"),
        ({"subgoal": "x", "task": {**task, "difficulty": "trivial"}}, "difficulty"),
        ({"subgoal": "x", "task": task, "note": "extra"}, "nothing else"),
    ]:
        with pytest.raises(ParseError, match=why):
            parse_subtask(json.dumps(bad), "terminal", 6)
    parents = [_parent("a.txt", "one"), _parent("b.txt", "two")]
    good = {"instruction": "Write one to a.txt and two to b.txt in the home folder.",
            "explanation": "both files are judged", "difficulty": "hard", "estimated_steps": 8}  # fmt: skip
    composed = parse_composition(json.dumps(good), parents)
    assert composed.task.evaluator.conj == "and" and len(composed.solution) == 8
    for bad, why in [
        ({**good, "difficulty": "easy"}, "schema"),
        ({**good, "estimated_steps": 2}, "from 4"),
        ({**good, "instruction": " "}, "empty"),
        ({**good, "config": []}, "schema"),
    ]:
        with pytest.raises(ParseError, match=why):
            parse_composition(json.dumps(bad), parents)
