"""Human-in-the-loop RL on a robot (HIL-SERL): the actor's loop (``session``), the learner and its links
(``learner``: in-process; ``distributed``: Ray), and the hil-train run (``run``; the robot commands are in
``robot_rl.cli``). The robot side (server, drivers, safety, teleop devices) is the ``real`` package."""
