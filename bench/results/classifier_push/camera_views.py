"""Usage: python camera_views.py [episodes, default 12]

How often each candidate camera sees the cube on arm push: the scripted push expert (noise 0.1/0.3/1.0 by episode
index mod 3, as collect_push_frames.py) runs each episode to its first success or 100 steps, and every frame is
rendered at 64x64 from the scene's `front` camera and from three overhead cameras added here only (not in the
scene): straight down from 1.3 m (`top_high`), from 0.9 m tilted 10 degrees (`top_mid`), and from the front at
1 m tilted 64 degrees down (`topfront`). A segmentation render counts the cube's pixels; a frame with fewer than 3 is
one where the classifier cannot see the cube. Writes camera_views.json and camera_views.png (episodes 0-1, every
25th step, one column per camera) beside this script."""
import json
import sys
from pathlib import Path

import mujoco
import numpy as np
from PIL import Image
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.experts import ScriptedExpert
from robot_rl.envs.arm.model import build_xml

CAMS = {
    "top_high": '<camera name="top_high" pos="0.38 0 1.3" xyaxes="0 1 0 -1 0 0" fovy="21"/>',
    "top_mid": '<camera name="top_mid" pos="0.45 0 0.9" xyaxes="0 1 0 -0.985 0 0.174" fovy="28"/>',
    "topfront": '<camera name="topfront" pos="0.85 0 1.0" xyaxes="0 1 0 -0.9 0 0.436" fovy="30"/>',
}
episodes = int(sys.argv[1]) if len(sys.argv) > 1 else 12
here = Path(__file__).parent
model = mujoco.MjModel.from_xml_string(build_xml().replace('<camera name="side"', "\n".join(CAMS.values())
                                                            + '\n<camera name="side"'))
data = mujoco.MjData(model)
rgb, seg = mujoco.Renderer(model, 64, 64), mujoco.Renderer(model, 64, 64)
seg.enable_segmentation_rendering()
cube = model.geom("cube").id
names = ["front", *CAMS]
pixels: dict[str, list[int]] = {c: [] for c in names}
rows = []
env = ArmEnv("push", "sparse")
for ep in range(episodes):
    expert = ScriptedExpert("push", 1, noise=[0.1, 0.3, 1.0][ep % 3], seed=1000 + ep)
    env.reset(seed=ep)
    for t in range(100):
        full = env.arm_task.observe(*env.physics.state())[0][None]
        _, _, _, _, info = env.step(expert.act(full)[0].numpy())
        data.qpos[:], data.mocap_pos[:], data.mocap_quat[:] = env.data.qpos, env.data.mocap_pos, env.data.mocap_quat
        mujoco.mj_forward(model, data)
        row = []
        for c in names:
            seg.update_scene(data, camera=c)
            s = seg.render()
            pixels[c].append(int(((s[..., 0] == cube) & (s[..., 1] == mujoco.mjtObj.mjOBJ_GEOM)).sum()))
            if ep < 2 and t % 25 == 0:
                rgb.update_scene(data, camera=c)
                row.append(rgb.render())
        if row:
            rows.append(np.concatenate(row, 1))
        if info["success"]:
            break
env.close()
result = {c: {"frames": len(v), "cube_pixels_median": float(np.median(v)),
              "hidden_share": float((np.asarray(v) < 3).mean())} for c, v in pixels.items()}
(here / "camera_views.json").write_text(json.dumps({"episodes": episodes, "size": [64, 64], "cameras": result,
                                                    "overhead_cameras": CAMS}, indent=1) + "\n")
Image.fromarray(np.concatenate(rows, 0)).save(here / "camera_views.png")
for c, r in result.items():
    print(f"{c:9s} cube pixels median {r['cube_pixels_median']:.0f} | hidden (< 3 px) {100 * r['hidden_share']:.1f}%")
