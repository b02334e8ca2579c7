"""`python -m robot_rl.cli <command> ...`, as `robot-rl` (what `robot_rl.seeds` starts for each seed)."""

from robot_rl.cli import main

raise SystemExit(main())
