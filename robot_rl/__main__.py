"""`python -m robot_rl <command> ...` runs the `robot-rl` command line (useful where the script is not on PATH)."""

from robot_rl.cli import main

raise SystemExit(main())
