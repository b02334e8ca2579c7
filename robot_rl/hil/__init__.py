"""Human-in-the-loop RL on a robot (HIL-SERL): the actor's loop (``session``), the learner and its links
(``learner``: in-process; ``distributed``: Ray), and the robot commands (``cli``: serve-robot, teleop, hil-train,
deploy). The robot side (server, drivers, safety, teleop devices) is the ``real`` package."""
