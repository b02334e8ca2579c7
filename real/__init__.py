"""The hardware bridge, robot side: interfaces, drivers, safety, the gRPC server and its client, teleop devices.

* ``robot_rl.real.robot``: the ``Robot`` interface a driver implements (``real/drivers/``: ``sim_arm``, ``ur_rtde``),
  with its cameras (``CameraSpec``; frames in ``RobotObservation.images``);
* ``robot_rl.real.images``: camera frames on the wire (JPEG or lossless PNG, size limits, ``FrameError``);
* ``robot_rl.real.cameras``: cameras for real drivers (``CallableCamera``, the untested ``OpenCVCamera``);
* ``robot_rl.real.teleop``: the ``Teleop`` interface and devices (keyboard, gamepad, SpaceMouse, scripted, replay);
* ``robot_rl.real.safety``: the robot-side filter every command passes (rejections and clamps, counted);
* ``robot_rl.real.supervisor``: limits on the measured state (envelope, speed, tracking): hold or stop and latch;
* ``robot_rl.real.guard``: the server's front door (token on metadata, reserved e-stop capacity, bounded body reads);
* ``robot_rl.real.server`` / ``robot_rl.real.client``: the wire protocol (``real/proto/bridge.proto``), the fixed-rate control
  loop with watchdog and e-stop latch, and the learner-side client, also as a gymnasium env.

The human-in-the-loop training on top (actor loop, learner, Ray) is ``robot_rl.hil``; ``docs/hardware.md`` is
the guide. ``real`` imports ``envs`` (the simulated arm) and nothing of ``robot_rl``.
"""
