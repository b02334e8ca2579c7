"""bench/pixel_update_cost.py builds the agent and replay as the trainer does; a moved API must break a test, not the
benchmark at its next run (it did when the replay cache moved into robot_rl.observations)."""

from bench.pixel_update_cost import ours_update


def test_one_camera_update_runs_on_the_benchmarks_replay():
    update, batch, stored = ours_update([], 64)
    metrics = update()
    assert batch > 0 and stored > 64 * 64 * 3 // 10  # frames stored once per step, two cameras
    assert metrics is None or isinstance(metrics, dict)
